#!/usr/bin/env bash
# Benchmark: wall time of a converged rerun of the playbook on @local (target: under 3 s).
#   bench/rerun.sh [ROUNDS] [ROOT]   default 5 rounds, root /tmp/gpuop-bench
# The first run converges the lab (not timed); each timed run must change nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
root=${2:-/tmp/gpuop-bench}
pyinfra=.venv/bin/pyinfra
run() { "$pyinfra" inventory.py deploy.py -y --json --data "gpuop_root=$root" 2>/dev/null; }
changed() { python3 -c 'import json,sys; print(json.load(sys.stdin)["results"]["totals"]["success"])'; }

run >/dev/null
times=()
for i in $(seq "$rounds"); do
  t0=$(date +%s.%N)
  n=$(run | changed)
  t1=$(date +%s.%N)
  t=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  times+=("$t")
  echo "run $i: ${t}s, $n operations changed"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "converged rerun on @local: min %.2fs, median %.2fs, max %.2fs\n", a[1], a[int((NR + 1) / 2)], a[NR] }'
