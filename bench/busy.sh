#!/usr/bin/env bash
# A bounded load on both cores, to prove the suite on a busy machine (docs/testing.md): a lab
# binary (crictl) built again and again from its Go module, each time into empty caches (Go's
# build cache and the lab's), at the tests' own priority, for SECONDS (default 1500), then gone.
#   bench/busy.sh 1500 & bash .ci/run
set -euo pipefail
seconds=${1:-1500}
here=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d /tmp/gpuop-busy.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
end=$((SECONDS + seconds))
builds=0
while [ $SECONDS -lt $end ]; do
  rm -rf "${scratch:?}"/*
  GOCACHE=$scratch/go-build GPUOP_LAB_CACHE=$scratch/lab \
    timeout $((end - SECONDS)) "$here/lab/build.sh" crictl >/dev/null 2>&1 && builds=$((builds + 1))
done
echo "bench/busy: crictl built $builds times in ${seconds}s" >&2
