#!/usr/bin/env bash
# The GPU proof's kit (bench/gpu/proof.sh; docs/gpu-proof.md), assembled as a folder from the
# lab's built binaries (lab/build.sh builds what is missing): what the proof needs on a machine
# that has only the NVIDIA driver.
#   lab/gpukit.sh KIT
#     KIT/containerd-V/   containerd V and its runc shim, for each of GPU_PROOF_CONTAINERDS
#     KIT/bin/            runc (static), crictl, ctr, nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook,
#                         crio, pinns, crio-import (images into CRI-O's store) and conmon (KIT/lib/conmon: Debian's,
#                         with its libraries)
#     KIT/images.tar      the stand-in pause under each runtime's sandbox image, and the probe image
#                         (busybox and this machine's glibc, where the driver's nvidia-smi runs)
#     KIT/node-read.sh    the node audit's read, the very command the fleet audit sends
#     KIT/probe.json      the repair probe's RuntimeClass handler and command (drain.probe_manifest)
#     KIT/proof.sh        bench/gpu/proof.sh; KIT/standin/nvidia-smi (the stand-in run's, lab/standin)
#     KIT/VERSIONS        what it holds
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
# shellcheck source=proc.sh
. "$here/proc.sh"
kit=$1
python=${PYTHON:-$repo/.venv/bin/python}
build() { "$here/build.sh" "$@"; }
# put FILE... DIR: hard links where the cache shares the file system, else copies
put() { cp -l "$@" 2>/dev/null || cp "$@"; }

rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/standin"
ctk=${NVIDIA_CTK_VERSIONS##* } newest=${GPU_PROOF_CONTAINERDS##* } pauses=()
for v in $GPU_PROOF_CONTAINERDS; do
  mkdir -p "$kit/containerd-$v"
  put "$(build containerd "$v")/containerd" "$(build shim "$v")/containerd-shim-runc-v2" "$kit/containerd-$v/"
  pauses+=("$(sandbox_image "$kit/containerd-$v/containerd")")
done
t=$(build nvidia-ctk "$ctk") crio=$(build crio)
put "$(build runc)/runc" "$(build crictl)/crictl" "$(build ctr "$newest")/ctr" \
  "$t/nvidia-ctk" "$t/nvidia-container-runtime" "$t/nvidia-cdi-hook" \
  "$crio/crio" "$crio/pinns" "$(build crio-import)/crio-import" "$kit/bin/"
pauses+=("$(sandbox_image "$crio/crio")")
# CRI-O's conmon: Debian's (it is C, no Go module), with its libraries and their loader beside it,
# run through that loader, so that it runs on any distribution.
mkdir -p "$kit/lib/conmon"
conmon=$(command -v conmon) || { echo "lab/gpukit: conmon is missing (lab/deps.sh installs it)" >&2; exit 1; }
cp "$conmon" "$kit/lib/conmon/conmon"
# shellcheck disable=SC2046 # one library a word
cp -L $(ldd "$conmon" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /ld-linux/ {print $1}') "$kit/lib/conmon/"
cat >"$kit/bin/conmon" <<'EOF'
#!/bin/sh
# Debian's conmon, with the libraries it was built against (lab/gpukit.sh)
lib=$(dirname "$(readlink -f "$0")")/../lib/conmon
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$lib/conmon" "$@"
EOF
chmod 755 "$kit/bin/conmon"
python3 "$here/standin/images.py" --gpu-proof "$kit/images.tar" "$(build standin)/standin" /bin/busybox \
  gpuop.io/gpu-probe:1 /lib/x86_64-linux-gnu "${pauses[@]}"
(cd "$repo" && "$python" -c 'from gpuop.reach.node_read import node_read; print(node_read("crictl"))') >"$kit/node-read.sh"
"$python" "$repo/bench/gpu/judge.py" --probe >"$kit/probe.json"
cp "$repo/bench/gpu/proof.sh" "$kit/proof.sh"
cp "$here/standin/nvidia-smi" "$kit/standin/nvidia-smi"
chmod 755 "$kit/proof.sh" "$kit/standin/nvidia-smi"
{
  echo "containerd $GPU_PROOF_CONTAINERDS"
  echo "runc $RUNC_VERSION"
  echo "crictl $CRICTL_VERSION"
  echo "nvidia-container-toolkit $ctk"
  echo "cri-o $CRIO_VERSION (conmon $(conmon --version | sed -n 's/^conmon version //p'))"
} >"$kit/VERSIONS"
echo "lab/gpukit: the GPU proof's kit in $kit ($(du -sh "$kit" | cut -f1))" >&2
