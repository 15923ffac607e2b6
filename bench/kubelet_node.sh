#!/usr/bin/env bash
# Benchmark: the lab's kubelet node (NODE=kubelet) on @local, for each containerd given (default Debian's
# 1.6.20 and 2.4.2): lab-up bringing the node up on an empty root, the playbook's fresh run on it,
# a converged rerun, and pyinfra's own floor (one `server.shell` of `true`) in the same round,
# since absolute times drift on a shared machine; then kubelet's and the lab containerd's
# resident memory. The lab is left as `make lab-up` leaves it (kwok's nodes only).
#   bench/kubelet_node.sh [CONTAINERD_VERSION...]   debian or a version of lab/versions.env
set -euo pipefail
cd "$(dirname "$0")/.."
pyinfra=.venv/bin/pyinfra
floor=$(mktemp --suffix=.py)
printf 'from pyinfra.operations import server\nserver.shell(name="floor", commands=["true"])\n' >"$floor"
root=/tmp/gpuop-bench-real
trap 'lab/kubeletnode.sh stop "$root" >/dev/null 2>&1 || true; rm -f "$floor"' EXIT
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
changed() { python3 -c 'import json,sys; print(json.load(sys.stdin)["results"]["totals"]["success"])'; }
rss_mib() { awk '/^VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$1/status"; }

versions=("$@")
[[ $# -gt 0 ]] || versions=(debian 2.4.2)
for version in "${versions[@]}"; do
  binary=/usr/bin/containerd
  [[ $version == debian ]] || binary=$(lab/build.sh containerd "$version")/containerd
  lab/kubeletnode.sh stop "$root" >/dev/null 2>&1 || true
  pkill -f -- "--root $root/var/lib/containerd " || true
  rm -rf "$root"
  data=(--data "gpuop_root=$root" --data "containerd_binary=$binary" --data kubelet_node=lab-node-0)
  t0=$(now); LAB_KUBELET_NODE=lab-node-0 LAB_ROOT=$root LAB_CONTAINERD=$binary lab/lab.sh up >/dev/null 2>&1
  t1=$(now); n1=$("$pyinfra" inventory.py deploy.py -y --json "${data[@]}" 2>/dev/null | changed)
  t2=$(now); n2=$("$pyinfra" inventory.py deploy.py -y --json "${data[@]}" 2>/dev/null | changed)
  t3=$(now); "$pyinfra" @local "$floor" -y >/dev/null 2>&1
  t4=$(now)
  kubelet=$(lab/kubeletnode.sh kubelet "$root")
  daemon=$(pgrep -f -- "--root $root/var/lib/containerd " | head -n 1)
  echo "containerd $version: lab-up with the kubelet node $(secs "$t0" "$t1")s, fresh run $(secs "$t1" "$t2")s" \
    "($n1 changed), converged rerun $(secs "$t2" "$t3")s ($n2 changed), pyinfra floor $(secs "$t3" "$t4")s;" \
    "kubelet $(rss_mib "$kubelet") MiB, containerd $(rss_mib "$daemon") MiB resident"
done
lab/kubeletnode.sh stop "$root" >/dev/null
lab/lab.sh up >/dev/null 2>&1
