#!/usr/bin/env bash
# Benchmark: the GPU proof's kit (lab/build.sh gpu-kit, then gpu-kit-archive) built cold, from
# nothing as on a new machine (empty Go module and build caches and an empty binary cache, all in
# a temporary directory, removed after; the real caches are left alone), then warm (the folder
# assembled again from the built binaries, the archive written again). Prints each build's own
# line, both times and the archive's size.
#   bench/gpu/kit_build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cold=$(mktemp -d /tmp/gpuop-kit-cold-XXXXXX)
trap 'chmod -R u+w "$cold" 2>/dev/null; rm -rf "$cold"' EXIT
export GOMODCACHE=$cold/mod GOCACHE=$cold/build GPUOP_LAB_CACHE=$cold/bin
start=$SECONDS
lab/build.sh gpu-kit >/dev/null
built=$((SECONDS - start))
archive=$(lab/build.sh gpu-kit-archive)
echo "cold: the kit's binaries built and the folder assembled in $((built / 60))m$((built % 60))s," \
  "the archive written in $((SECONDS - start - built))s"
rm -f "$archive.sums"  # the archive written again, from the same files
start=$SECONDS
lab/build.sh gpu-kit >/dev/null
assembled=$((SECONDS - start))
before=$(sha256sum <"$archive")
lab/build.sh gpu-kit-archive >/dev/null
[ "$(sha256sum <"$archive")" = "$before" ] && same="the same bytes" || same="OTHER BYTES"
echo "warm: the folder assembled in ${assembled}s, the archive written in $((SECONDS - start - assembled))s" \
  "($same as the cold one's), $(($(stat -c %s "$archive") / 1048576)) MiB"
