#!/usr/bin/env bash
# Benchmark: a converged rerun of the playbook on @local against pyinfra's own floor (an empty
# deploy on the same inventory), paired: each round runs both, back to back, so that a busy
# machine slows both alike. Prints each round's wall time and peak memory (resident, KiB), then
# the medians and their ratio (target: the rerun within 1.5x of the floor). Beside them, for
# reference, the floor ending as gpuop's runs end (runbook/run/overhead.py: frozen at exit, without
# Python's last garbage collections): the rerun against it is gpuop's own work alone.
#   bench/rerun.sh [ROUNDS] [ROOT]   default 7 rounds, root /tmp/gpuop-bench
# The first run converges the lab (not timed); each timed rerun must change nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
root=${2:-/tmp/gpuop-bench}
pyinfra=.venv/bin/pyinfra
floor=$(mktemp --suffix=.py) frozen=$(mktemp --suffix=.py)
out=$(mktemp) stats=$(mktemp)
trap 'rm -f "$floor" "$frozen" "$out" "$stats"' EXIT
echo "# the floor: pyinfra connects, prepares and disconnects, with no operation" >"$floor"
printf '%s\n' "# the floor, ending as gpuop's runs end" "from runbook.run import overhead" \
  "overhead.freeze_at_exit()" >"$frozen"

# timed FILE ARGS...: the run's "wall_s peak_kib" on stdout, its JSON in $out.
# A run that hangs (a lab gone wrong) ends the benchmark at 300 s, not never.
timed() { /usr/bin/time -f '%e %M' -o "$stats" timeout -k 5 300 "$pyinfra" inventory.py "$@" -y --json >"$out" 2>/dev/null; cat "$stats"; }
changed() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"]["totals"]["success"])' "$out"; }

timed deploy.py --data "gpuop_root=$root" >/dev/null
runs=() floors=() frozens=() mems=() floor_mems=()
for i in $(seq "$rounds"); do
  read -r fw fm < <(timed "$floor")
  read -r zw _ < <(timed "$frozen")
  read -r rw rm < <(timed deploy.py --data "gpuop_root=$root")
  n=$(changed)
  [ "$n" = 0 ] || { echo "round $i: the rerun changed $n operations: the lab is not converged" >&2; exit 1; }
  floors+=("$fw") frozens+=("$zw") runs+=("$rw") floor_mems+=("$fm") mems+=("$rm")
  echo "round $i: rerun ${rw}s ${rm} KiB, floor ${fw}s ${fm} KiB, frozen floor ${zw}s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
r=$(median "${runs[@]}") f=$(median "${floors[@]}") z=$(median "${frozens[@]}")
awk -v r="$r" -v f="$f" -v z="$z" -v rm="$(median "${mems[@]}")" -v fm="$(median "${floor_mems[@]}")" 'BEGIN {
  printf "converged rerun on @local: median %.2fs against the floor %.2fs (%.2fx); peak memory %d MiB against %d MiB\n",
    r, f, r / f, rm / 1024, fm / 1024
  printf "  against the floor ending frozen as gpuop does, %.2fs: %.2fx (gpuop'"'"'s own work alone)\n", z, r / z }'
