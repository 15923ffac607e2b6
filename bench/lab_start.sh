#!/usr/bin/env bash
# Benchmark: how fast the lab comes back with warm (cached) binaries.
#   bench/lab_start.sh [ROUNDS]   default 3 rounds of: lab-up on a running lab, lab-down, lab-up
# Uses a lab of its own (gpuop-bench) so the default lab and its state are left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
name=gpuop-bench
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
current=$(kubectl config current-context 2>/dev/null || true)

lab/lab.sh up "$name" >/dev/null 2>&1
for i in $(seq "$rounds"); do
  t0=$(now); lab/lab.sh up "$name" >/dev/null 2>&1
  t1=$(now); lab/lab.sh down "$name" >/dev/null 2>&1
  t2=$(now); lab/lab.sh up "$name" >/dev/null 2>&1
  t3=$(now)
  echo "round $i: lab-up on a running lab $(secs "$t0" "$t1")s, lab-down $(secs "$t1" "$t2")s, lab-up from nothing (warm binaries) $(secs "$t2" "$t3")s"
done
lab/lab.sh down "$name" >/dev/null 2>&1
[ -z "$current" ] || kubectl config use-context "$current" >/dev/null
