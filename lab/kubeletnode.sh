#!/usr/bin/env bash
# The lab's kubelet node: a real kubelet for one lab node (lab-node-0), on the lab containerd that
# the playbook manages under ROOT, both in mount and PID namespaces of the node's own, so that what
# the kubelet and the containers write outside ROOT stays inside it, and a host-PID Pod on the node
# (the node audit's cluster reach) finds the node's own init as PID 1 (nsenter -t 1), as on a real
# node (this machine's own PID 1 is not ours to enter):
#   /run is a tmpfs (the shims' sockets, runc's state); /var/lib, /var/log and /usr/bin are
#   overlays whose writes land in ROOT/var/node (kubelet's /var/lib/kubelet, Pod logs, and the
#   stand-in /usr/bin/nvidia-container-runtime); the global sysctls kubelet sets land in files
#   bound over them, and /proc/meminfo says the seed's 32Gi. The namespaces are held by
#   ROOT/var/node/mnt and ROOT/var/node/pid and by the node's init (PID 1 there, a shell that
#   reaps what is left to it): the playbook starts its containerd in them (nsenter --mount --pid).
#
#   lab/kubeletnode.sh up ROOT NODE CONTAINERD [CLUSTER]
#       the namespace, the stand-in images in the lab containerd's store (through the daemon
#       that answers on ROOT's socket, or a short-lived one on its root), and kubelet as NODE of
#       kwokctl cluster CLUSTER (default gpuop-lab); each only where missing. kubelet runs as a
#       service would: started again whenever it exits, so it registers NODE once the lab
#       containerd (which the playbook starts) answers.
#   lab/kubeletnode.sh stop ROOT      kubelet, every process in the namespace, and the namespace
#   lab/kubeletnode.sh stop-all CLUSTER [ROOT]  every kubelet node of lab CLUSTER on this host (lab-down), but ROOT's
#   lab/kubeletnode.sh kubelet ROOT   kubelet's pid, when it runs
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "lab/kubeletnode.sh: $*" >&2; exit 1; }
log() { echo "lab/kubeletnode[$node]: $*" >&2; }

# What the seed's manifests run, stood in (templates/gpu-pod.yaml.j2; the toolkit knobs of
# group_data/all.py), besides the containerd's own sandbox image.
IMAGES=(
  "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04=cuda-12.4.1"
  "nvcr.io/nvidia/k8s/container-toolkit:v1.16.2=container-toolkit-v1.16.2"
  "nvcr.io/nvidia/k8s/container-toolkit:v1.17.0=container-toolkit-v1.17.0"
)
SYSCTLS="vm/overcommit_memory kernel/panic kernel/panic_on_oops"
# The cluster reach's read image (group_data's node_pod_image, as every runtime names
# it): Debian's static busybox packed as an image, so that `nodes.py audit.py --data reach=cluster`
# reads this node as it reads a real one (nothing can be pulled here).
READ_IMAGE=docker.io/library/busybox:1.37
MEMORY_KIB=33554432  # the seed's node memory, 32Gi: what kubelet reads in the node's /proc/meminfo
OVERLAYS="/var/lib /var/log /usr/bin"

# shellcheck source=proc.sh
. "$here/proc.sh"
quietly() { "$@" >/dev/null 2>&1; }

kubelet_pid() { pids_with_arg "$dir/kubelet.yaml" kubelet | head -n 1; }

# The node's init: PID 1 of its namespaces, found by what it is (its command line names $dir).
init_pid() { pids_with_arg "$dir" bash | head -n 1; }

held() { [[ $(stat -f -c %T "$dir/mnt" 2>/dev/null) == nsfs && -n $(init_pid) ]]; }

# Every process in the namespace ROOT/var/node/mnt holds (by its mount namespace's identity).
ns_pids() {
  local ns p
  ns=$(stat -L -c %i "$dir/mnt" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "mnt:[$ns]" ]] && echo "${p#/proc/}"
  done
  return 0
}

inside() { nsenter --mount="$dir/mnt" --pid="$dir/pid" -- "$@"; }

make_namespace() {
  local d f
  mkdir -p "$dir"
  # The namespace file must sit on a private mount (a shared one refuses it): $dir bound on itself.
  mountpoint -q "$dir" || { mount --bind "$dir" "$dir"; mount --make-private "$dir"; }
  touch "$dir/mnt" "$dir/pid"
  for d in $OVERLAYS; do mkdir -p "$dir/overlay$d/upper" "$dir/overlay$d/work"; done
  for f in $SYSCTLS; do cat "/proc/sys/$f" >"$dir/sysctl-${f//\//.}"; done
  # The seed's node has 32Gi: kubelet's capacity is MemTotal (cAdvisor). Its CPUs come from
  # sysfs' topology, which stays this machine's.
  sed "s/^MemTotal: .*/MemTotal:       $MEMORY_KIB kB/" /proc/meminfo >"$dir/meminfo"
  # The mounts are made inside (on the node's own /proc), by a script that gets its words as data
  # (environment), not spliced in; it then becomes the node's init, which outlives every process
  # entered into the namespaces and reaps those left to it.
  OVERLAYS=$OVERLAYS SYSCTLS=$SYSCTLS setsid unshare --mount="$dir/mnt" --pid="$dir/pid" --fork --mount-proc \
    --propagation private bash -euc '
    dir=$1
    mount -t tmpfs -o mode=755 tmpfs /run
    for d in $OVERLAYS; do
      mount -t overlay overlay -o "lowerdir=$d,upperdir=$dir/overlay$d/upper,workdir=$dir/overlay$d/work" "$d"
    done
    for f in $SYSCTLS; do mount --bind "$dir/sysctl-$(echo "$f" | tr / .)" "/proc/sys/$f"; done
    mount --bind "$dir/meminfo" /proc/meminfo
    exec bash -c "trap exit TERM; while :; do sleep 3600 & wait \$!; done" gpuop-node-init "$dir"
  ' sh "$dir" </dev/null >"$dir/init.log" 2>&1 &
  wait_until 10 0.1 "the node's init in $dir/mnt" held || die "the node's namespaces were not made: $(tail -n 3 "$dir/init.log")"
  log "namespaces $dir/mnt and $dir/pid made"
}

# The stand-in nvidia runtime, the Pod network and kubelet's configuration, as files.
write_files() {
  local runc ca port
  runc=$(command -v runc) || die "runc is missing (lab/deps.sh installs it)"
  mkdir -p "$dir/overlay/usr/bin/upper" "$dir/cni/bin" "$dir/cni/net.d"
  cat >"$dir/overlay/usr/bin/upper/nvidia-container-runtime" <<SH
#!/bin/sh
# gpuop's stand-in for the NVIDIA container runtime (no GPU here): it logs each call, then runs runc.
echo "\$(date -u +%FT%T.%NZ) \$*" >>$dir/nvidia-container-runtime.log
exec $runc "\$@"
SH
  chmod 755 "$dir/overlay/usr/bin/upper/nvidia-container-runtime"
  cp "$here/standin/cni" "$dir/cni/bin/gpuop-lab"
  ln -sfn /usr/lib/cni/loopback "$dir/cni/bin/loopback"  # containerd's CRI runs it for every Pod
  cat >"$dir/cni/net.d/10-gpuop-lab.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "gpuop-lab", "plugins": [{"type": "gpuop-lab", "subnet": "10.88.0"}]}
JSON
  ca=$cluster_dir/pki/ca.crt
  [[ -f $ca ]] || die "cluster $cluster has no CA at $ca (lab/lab.sh up first)"
  # Its port is kept across runs (the API server reaches kubelet there for logs and exec).
  port=$(sed -n 's/^ *"port": \([0-9]*\),*$/\1/p' "$dir/kubelet.yaml" 2>/dev/null || true)
  [[ -n $port ]] || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  python3 "$here/labcluster.py" kubelet-config "unix://$root/run/containerd/containerd.sock" "$port" "$ca" \
    >"$dir/kubelet.yaml.new"
  mv "$dir/kubelet.yaml.new" "$dir/kubelet.yaml"
}

# The sandbox image the containerd binary defaults to (its `config default`), the seed's, and
# the cluster reach's read image.
ensure_images() {
  local sandbox archive=$dir/images.tar sock=$root/run/containerd/containerd.sock want=() missing=()
  sandbox=$(sandbox_image "$containerd")
  [[ -n $sandbox ]] || die "$containerd config default names no sandbox image"
  local specs=("$sandbox=pause" "${IMAGES[@]}") s
  for s in "${specs[@]}"; do want+=("${s%%=*}"); done
  local standin
  standin=$("$here/build.sh" standin)/standin
  python3 "$here/standin/images.py" "$archive.new" "$standin" "${specs[@]}"
  mv "$archive.new" "$archive"
  python3 "$here/standin/images.py" --busybox "$dir/read.tar.new" /bin/busybox "$READ_IMAGE"
  mv "$dir/read.tar.new" "$dir/read.tar"
  want+=("$READ_IMAGE")
  local tmp="" ctr=(ctr --namespace k8s.io --timeout 10s)
  if ! ctr --address "$sock" --timeout 3s version >/dev/null 2>&1; then
    local holder
    holder=$(pids_with_arg "$root/var/lib/containerd" containerd | head -n 1)
    if [[ -n $holder ]]; then  # one per root: the playbook's next run restarts it, the next lab-up imports
      log "the lab containerd (pid $holder) holds $root/var/lib/containerd but does not answer: stand-in images not checked"
      return 0
    fi
    # No lab daemon: a short-lived one on the same root, in the node's namespace (its unpacking
    # mounts stay there), on a socket of its own.
    tmp=$dir/import
    mkdir -p "$tmp"
    sock=$tmp/containerd.sock
    inside setsid "$containerd" --config /dev/null --root "$root/var/lib/containerd" --state "$tmp/state" \
      --address "$sock" </dev/null >"$tmp/containerd.log" 2>&1 &
    wait_until 10 0.1 "the importing containerd to answer" quietly ctr --address "$sock" --timeout 3s version ||
      { tail -n 3 "$tmp/containerd.log" >&2; die "the importing containerd did not answer"; }
  fi
  local have
  have=$("${ctr[@]}" --address "$sock" images list --quiet)
  for s in "${want[@]}"; do grep -qxF "$s" <<<"$have" || missing+=("$s"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    inside "${ctr[@]}" --address "$sock" images import --all-platforms "$archive" >/dev/null
    inside "${ctr[@]}" --address "$sock" images import --all-platforms "$dir/read.tar" >/dev/null
    log "stand-in images imported: ${missing[*]}"
  fi
  if [[ -n $tmp ]]; then
    # shellcheck disable=SC2046
    python3 "$here/labproc.py" stop "the importing containerd" $(pids_with_arg "$sock" containerd)
    rm -rf "$tmp"
  fi
}

k() { kubectl --kubeconfig "$cluster_dir/kubeconfig.yaml" --request-timeout=10s "$@"; }

# kubelet as a node's service runs it: started again a second after it exits (kubelet exits at
# once while its runtime does not answer, so it waits for the lab containerd this way).
kubelet_service() {
  local kubelet=$1
  shift
  while :; do
    "$kubelet" "$@" </dev/null >>"$dir/kubelet.log" 2>&1 || echo "kubelet exited ($?); starting it again in 1s" >>"$dir/kubelet.log"
    sleep 1
  done
}

service_pid() { pids_with_arg "$dir/kubelet.service" bash | head -n 1; }

start_kubelet() {
  local kubelet node_ip
  kubelet=$("$here/build.sh" kubelet)/kubelet
  # The API server reaches kubelet (logs, exec) at this address: the host's own, as its name resolves nowhere.
  node_ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  # A kwok node of this name would stay kwok's: the kubelet registers its own.
  if [[ -n $(k get node "$node" -o jsonpath='{.metadata.annotations.kwok\.x-k8s\.io/node}' 2>/dev/null) ]]; then
    k delete node "$node" >/dev/null
    log "kwok's $node deleted, for the kubelet's own"
  fi
  inside setsid bash "$0" kubelet-service "$dir/kubelet.service" "$kubelet" --config "$dir/kubelet.yaml" \
    --kubeconfig "$cluster_dir/kubeconfig.yaml" --hostname-override "$node" ${node_ip:+--node-ip "$node_ip"} \
    --root-dir /var/lib/kubelet </dev/null >/dev/null 2>&1 &
  log "kubelet started as a service (it registers $node once the lab containerd answers)"
}

# The node's processes: its kubelet service, everything in its namespace, the lab containerd's
# shims (by their -address), and containers whose runc state went with a killed containerd (by
# their cgroups, $cgroups, named for the tasks the lab containerd keeps: see stop_node).
node_pids() {
  local c
  service_pid; ns_pids; kubelet_pid
  pids_with_arg "$root/run/containerd/containerd.sock" containerd-shim-runc-v2
  for c in "${cgroups[@]}"; do cat "$c/cgroup.procs" 2>/dev/null; done
}

# stop_node: every process of the node, then its containers' cgroups, its namespace and its
# private mount. Again until none is left: a process being started as they are killed (a shim,
# a container's runc init) is found on the next round.
stop_node() {
  local pids c runc_root=/run/containerd/runc/k8s.io cgroups=() round
  for round in 1 2 3 4 5; do
    # Containers have mount namespaces of their own: runc, in the node's, deletes them (and their cgroups).
    if held; then
      for c in $(inside runc --root "$runc_root" list --quiet 2>/dev/null); do
        inside runc --root "$runc_root" delete --force "$c" 2>/dev/null || true
      done
    fi
    cgroups_named k8s.io/ "$root"/run/containerd/io.containerd.runtime.v2.task/k8s.io  # the lab containerd's tasks
    mapfile -t pids < <(node_pids | sort -u)
    [[ ${#pids[@]} -gt 0 ]] || break
    # TERM first (kubelet, the shims and the stand-ins take it), KILL what is left after 5 s.
    python3 "$here/labproc.py" stop --grace=5 "the node's processes" "${pids[@]}"
  done
  for c in "${cgroups[@]}"; do [[ ! -d $c ]] || rmdir "$c" 2>/dev/null || true; done
  rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null || true  # only where no other containerd's Pods are
  local f
  for f in mnt pid; do ! mountpoint -q "$dir/$f" || umount "$dir/$f"; done
  ! mountpoint -q "$dir" || umount "$dir"
}

# The node of lab root ROOT, named NAME in the log: the functions above work on it ($root, $dir).
at() { root=$(realpath -m "$1") dir=$(realpath -m "$1")/var/node node=$2; }

cmd=${1:-}
case $cmd in
up)
  [[ $# -ge 4 ]] || die "usage: up ROOT NODE CONTAINERD [CLUSTER]"
  at "$2" "$3"
  containerd=$4 cluster=${5:-gpuop-lab}
  cluster_dir=$HOME/.kwok/clusters/$cluster
  [[ -x $containerd ]] || die "no containerd at $containerd"
  # A built containerd's Pods need its own runc shim (the lab containerd finds it beside itself).
  version=$("$containerd" --version | awk '{print $3}')
  [[ -x ${containerd%/*}/containerd-shim-runc-v2 ]] || "$here/build.sh" shim "${version#v}" >/dev/null
  mkdir -p "$dir"
  echo "$cluster" >"$dir/lab"  # which lab's node it is: lab/labproc.py
  write_files
  # A namespace without its init (made before the node had one, or its init killed) is made anew.
  held || { stop_node; make_namespace; }
  ensure_images
  [[ -n $(service_pid) ]] || start_kubelet
  ;;
kubelet-service)  # inside the namespace: DIR/kubelet.service KUBELET ARGS...
  dir=$(dirname "$2")
  shift 2
  kubelet_service "$@"
  ;;
stop)
  [[ $# -eq 2 ]] || die "usage: stop ROOT"
  at "$2" "$2"
  stop_node
  ;;
stop-all)
  [[ $# -ge 2 ]] || die "usage: stop-all CLUSTER [ROOT]"
  for d in $(python3 "$here/labproc.py" kubelet-nodes "$2" ${3:+"$3"}); do
    at "${d%/var/node}" "${d%/var/node}"
    stop_node
  done
  ;;
kubelet)
  at "$2" "$2"
  kubelet_pid
  ;;
*) die "usage: up ROOT NODE CONTAINERD [CLUSTER] | stop ROOT | stop-all CLUSTER [ROOT] | kubelet ROOT" ;;
esac
