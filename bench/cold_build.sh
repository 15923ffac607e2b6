#!/usr/bin/env bash
# Benchmark: every lab binary `make test` needs (lab/build.sh all: the cluster, kubelet, crictl,
# nvidia-ctk, every containerd, the newest one's shim, the stand-in program), built from nothing
# as on a new machine: empty Go module and build caches and an empty binary cache (all in a
# temporary directory, removed after; the real caches are left alone). Prints each build's own
# line and the total.
#   bench/cold_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cold=$(mktemp -d /tmp/gpuop-cold-XXXXXX)
trap 'chmod -R u+w "$cold" 2>/dev/null; rm -rf "$cold"' EXIT
export GOMODCACHE=$cold/mod GOCACHE=$cold/build GPUOP_LAB_CACHE=$cold/bin
start=$SECONDS
lab/build.sh all
echo "cold build of every lab binary: $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
