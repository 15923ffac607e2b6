#!/usr/bin/env bash
# Benchmark: wall time of the read-only audit on @local at the incident's end state (target: < 3 s).
#   bench/audit.sh [ROUNDS] [ROOT]   default 5 rounds, root /tmp/gpuop-bench
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
root=${2:-/tmp/gpuop-bench}
pyinfra=.venv/bin/pyinfra
"$pyinfra" inventory.py deploy.py -y --data "gpuop_root=$root" >/dev/null 2>&1  # the end state
times=()
for i in $(seq "$rounds"); do
  t0=$(date +%s.%N)
  "$pyinfra" inventory.py audit.py -y --data "gpuop_root=$root" >/dev/null 2>&1 || true  # gaps: exit 1
  t1=$(date +%s.%N)
  times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')")
  echo "audit $i: ${times[-1]}s"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "audit on @local: min %.2fs, median %.2fs, max %.2fs\n", a[1], a[int((NR + 1) / 2)], a[NR] }'
