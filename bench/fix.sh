#!/usr/bin/env bash
# Benchmark: the repair on @local. Each round brings the incident back (deploy.py, not timed),
# times fix.py repairing it, then a converged fix.py rerun, and pyinfra's own floor (one
# `server.shell` of `true`) in the same round, since absolute times drift on a shared machine.
#   bench/fix.sh [ROUNDS] [ROOT] [CONTAINERD_BINARY]   default 3 rounds, /tmp/gpuop-bench, Debian's
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
root=${2:-/tmp/gpuop-bench}
data=(--data "gpuop_root=$root" --data "containerd_binary=${3:-/usr/bin/containerd}")
pyinfra=.venv/bin/pyinfra
floor=$(mktemp --suffix=.py)
printf 'from pyinfra.operations import server\nserver.shell(name="floor", commands=["true"])\n' >"$floor"
trap 'rm -f "$floor"' EXIT
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
changed() { python3 -c 'import json,sys; print(json.load(sys.stdin)["results"]["totals"]["success"])'; }

for i in $(seq "$rounds"); do
  "$pyinfra" inventory.py deploy.py -y "${data[@]}" >/dev/null 2>&1
  t0=$(now); n1=$("$pyinfra" inventory.py fix.py -y --json "${data[@]}" 2>/dev/null | changed)
  t1=$(now); n2=$("$pyinfra" inventory.py fix.py -y --json "${data[@]}" 2>/dev/null | changed)
  t2=$(now); "$pyinfra" @local "$floor" -y >/dev/null 2>&1
  t3=$(now)
  echo "round $i: fix on the incident $(secs "$t0" "$t1")s ($n1 operations changed)," \
    "converged fix rerun $(secs "$t1" "$t2")s ($n2 changed), pyinfra floor $(secs "$t2" "$t3")s"
done
