#!/usr/bin/env bash
# A simulated GPU node, for the node audit's tests and benchmark: its own mount, pid and UTS
# namespaces, where /etc/containerd (or /etc/crio), /run and /var/lib are its own at the default
# paths; a containerd (or CRI-O) started with no flags, as systemd starts it; and sshd on a
# loopback port.
# Nothing of the host's is touched: /etc/containerd is a bind of DIR/etc, /run a tmpfs, /var/lib
# an overlay whose writes land in DIR/varlib, all private to the namespace and gone with it.
#
#   lab/simnode.sh start DIR RUNTIME HOSTNAME [CLUSTER]   DIR holds etc/ (the node's
#       /etc/containerd) and sshd_config; RUNTIME: a containerd, or a crio (CRI-O: DIR/crio is
#       then the node's /etc/crio); optionally usr-bin/ (files the node's /usr/bin has
#       beside the host's: a stand-in nvidia-container-runtime) and driver/ (its NVIDIA driver's
#       files, lab/drivertree.sh); optional hooks run inside: DIR/before.sh before
#       the runtime starts, DIR/after.sh once its socket is there. SIMNODE_ALSO=BINARY starts a
#       second runtime beside it. Returns once sshd listens.
#       The node is lab CLUSTER's (default gpuop-lab): that lab's down stops it. With
#       SIMNODE_RESTART=always its containerd is supervised as systemd's Restart=always does:
#       started again whenever it ends, after DIR/restart.sh where there is one (what a
#       distribution does to its config at each start: k3s's render of its template).
#   lab/simnode.sh stop DIR                        the namespace's first process, and so all of it
#   lab/simnode.sh pid DIR                         that first process's pid, as the host sees it
#   lab/simnode.sh stop-all CLUSTER                every simulated node of lab CLUSTER (lab-down)
set -euo pipefail
# shellcheck source=proc.sh
. "$(cd "$(dirname "$0")" && pwd)/proc.sh"
# shellcheck source=drivertree.sh
. "$(cd "$(dirname "$0")" && pwd)/drivertree.sh"

die() { echo "lab/simnode.sh: $*" >&2; exit 1; }

# The `unshare` whose command line names DIR (found by what it is, not by a pid file) ...
ns_unshare() { pids_with_arg "$1" unshare; }

# ... and its child, the namespace's first process: stopping it stops every process inside.
ns_init() {
  local p
  for p in $(ns_unshare "$1"); do cat "/proc/$p/task/$p/children" 2>/dev/null; done
}

# listening DIR PORT STARTER: sshd of node DIR listens on PORT; the node is gone: fail the start
# at once. Gone is neither the process started for it (STARTER, which becomes its unshare) nor
# its unshare there: right after the start, the unshare may not have been exec'd yet.
listening() {
  (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
  kill -0 "$3" 2>/dev/null || [[ -n $(ns_unshare "$1") ]] || die "node $1 exited: $(tail -n 5 "$1/node.log")"
  return 1
}

gone() { [[ -z $(ns_unshare "$1") ]]; }

# socket_of BINARY: the socket a runtime opens when started with no flags, as systemd starts it.
socket_of() {
  case ${1##*/} in
  crio) echo /var/run/crio/crio.sock ;;
  *) echo /run/containerd/containerd.sock ;;
  esac
}

# start_daemon DIR BINARY: a runtime started with no flags, its output in DIR/NAME.log, and
# supervised as systemd's Restart=always does with SIMNODE_RESTART=always; returns once its socket
# is there.
start_daemon() {
  local dir=$1 bin=$2 log=$1/${2##*/}.log
  if [[ ${SIMNODE_RESTART:-no} == always ]]; then
    # shellcheck disable=SC2016 # expanded by the supervisor's own shell
    setsid bash -c 'while :; do "$0" </dev/null >>"$1" 2>&1; sleep 0.2; [[ ! -x $2 ]] || "$2" >>"$1" 2>&1; done' \
      "$bin" "$log" "$dir/restart.sh" &
  else
    setsid "$bin" </dev/null >"$log" 2>&1 &
  fi
  wait_until 20 0.1 "${bin##*/} to open its socket" test -S "$(socket_of "$bin")"
}

# crio_cgroups STORE: the cgroups of the containers and sandboxes in a CRI-O node's store, added
# to $cgroups: with cgroupfs and no parent from kubelet, CRI-O names them crio-ID at the top and
# crio/crio-ID.
crio_cgroups() {
  cgroups_named crio- "$1"/*-containers
  cgroups_named crio/crio- "$1"/*-containers
}

inside() {  # runs as the namespace's pid 1
  local dir=$1 runtime=$2
  mount -t tmpfs -o mode=755 tmpfs /run
  # Its NVIDIA driver, where DIR/driver plants one (tests/helpers/drivers.py), first: the mounts
  # below lay theirs over it
  [[ ! -d $dir/driver ]] || LAY_RUN=copy lay_driver "$dir/driver"
  mkdir -p /run/containerd /run/sshd "$dir/varlib/upper" "$dir/varlib/work"
  if [[ -d $dir/crio ]]; then
    # A CRI-O node: /etc/crio (which the host has not) is DIR/crio, on an overlay of /etc whose
    # writes land in DIR/etc-upper; its Pods' logs go to a private /var/log.
    mkdir -p "$dir/etc-upper/crio" "$dir/etc-work"
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$dir/etc-upper,workdir=$dir/etc-work" /etc
    mount --bind "$dir/crio" /etc/crio
    mount -t tmpfs -o mode=755 tmpfs /var/log
    # CRI-O makes its default hooks_dir (/usr/share/containers/oci/hooks.d) where it is missing:
    # on an overlay of /usr/share whose writes land in DIR/share-upper, never on the host.
    mkdir -p "$dir/share-upper" "$dir/share-work"
    mount -t overlay overlay -o "lowerdir=/usr/share,upperdir=$dir/share-upper,workdir=$dir/share-work" /usr/share
    # No huge pages here: kubelet would then ask a limit of 0 for each size, and CRI-O passes them on
    # whenever the kernel knows hugetlb (/proc/cgroups), mounted or not; runc then fails to create
    # any container on a cgroup v1 host that leaves hugetlb unmounted (containerd skips them there).
    mount -t tmpfs -o ro,mode=755 tmpfs /sys/kernel/mm/hugepages
  fi
  mount --bind "$dir/etc" /etc/containerd
  mount -t overlay overlay -o "lowerdir=/var/lib,upperdir=$dir/varlib/upper,workdir=$dir/varlib/work" /var/lib
  # What a package would have installed in /usr/bin (DIR/usr-bin: a stand-in runtime), over the host's, read-only
  [[ ! -d $dir/usr-bin ]] || mount -t overlay overlay -o "lowerdir=$dir/usr-bin:/usr/bin" /usr/bin
  hostname "$3"
  [[ ! -x $dir/before.sh ]] || "$dir/before.sh"
  # Its Pods' runc shim (CRI-O's pinns) is its own release's, found beside it first (a package
  # installs them together).
  export PATH=${runtime%/*}:$PATH
  start_daemon "$dir" "$runtime" || exit 1
  # SIMNODE_ALSO: a second runtime beside the first (a node that runs containerd and CRI-O).
  [[ -z ${SIMNODE_ALSO:-} ]] || PATH=${SIMNODE_ALSO%/*}:$PATH SIMNODE_RESTART=no start_daemon "$dir" "$SIMNODE_ALSO" || exit 1
  [[ ! -x $dir/after.sh ]] || "$dir/after.sh"
  exec /usr/sbin/sshd -D -e -f "$dir/sshd_config"
}

case ${1:-} in
  start)
    [[ $# -eq 4 || $# -eq 5 ]] || die "usage: start DIR RUNTIME HOSTNAME [CLUSTER]"
    dir=$(realpath "$2"); [[ -d $dir/etc && -f $dir/sshd_config ]] || die "$dir needs etc/ and sshd_config"
    [[ -d /etc/containerd ]] || die "/etc/containerd is missing on this host (install containerd: lab/deps.sh)"
    [[ -z $(ns_unshare "$dir") ]] || die "a node already runs on $dir"
    echo "${5:-gpuop-lab}" >"$dir/lab"  # which lab's node it is: lab/labproc.py
    port=$(awk '$1 == "Port" {print $2}' "$dir/sshd_config")
    # every signal at its default, as a booted node's daemons have them: one ignored by whoever
    # started the tests (nohup ignores SIGHUP) would be ignored by the node's containerd too, and
    # the GPU Operator installer's SIGHUP would never end it
    setsid env --default-signal unshare -m -p -u -f --mount-proc --propagation private \
      bash "$0" inside "$dir" "$3" "$4" </dev/null >"$dir/node.log" 2>&1 &
    wait_until 40 0.1 "node $dir's sshd to listen on $port" listening "$dir" "$port" "$!" ||
      die "node $dir: sshd did not listen: $(tail -n 5 "$dir/node.log")" ;;
  inside) shift; inside "$@" ;;
  pid) ns_init "$(realpath "$2")" | head -n 1 ;;
  stop-all)
    [[ $# -eq 2 ]] || die "usage: stop-all CLUSTER"
    for dir in $(python3 "$(dirname "$0")/labproc.py" sim-nodes "$2"); do "$0" stop "$dir"; done ;;
  stop)
    dir=$(realpath "$2")
    # The cgroups of its containers (a registered kubelet's Pods), named for the containers and
    # sandboxes its runtime keeps (containerd's CRI and the tasks it runs, CRI-O's store): the
    # kernel keeps them after their processes, so they are removed too.
    init=$(ns_init "$dir" | awk '{print $1; exit}')
    cgroups=()
    if [[ -n $init ]]; then
      cgroups_named k8s.io/ "/proc/$init/root"{/var/lib/containerd/io.containerd.grpc.v1.cri/*,/run/containerd/io.containerd.runtime.v2.task/k8s.io}
      crio_cgroups "/proc/$init/root/var/lib/containers/storage"
    fi
    # The namespace's first process: once it ends, the kernel ends every process inside.
    # shellcheck disable=SC2046
    python3 "$(dirname "$0")/labproc.py" stop --grace=5 "node $dir" $(ns_init "$dir")
    wait_until 10 0.1 "node $dir to stop" gone "$dir" || die "node $dir did not stop"
    # and a sandbox or container its kubelet began after that look: its state dir outlives the
    # node in /var/lib's upper layer, or in DIR/containerd-root where a registered kubelet's node
    # binds its /var/lib/containerd (its cgroup exists as soon as runc made it)
    cgroups_named k8s.io/ "$dir"/{varlib/upper/containerd,containerd-root}/io.containerd.grpc.v1.cri/*
    crio_cgroups "$dir/varlib/upper/containers/storage"
    for c in "${cgroups[@]}"; do [[ ! -d $c ]] || wait_until 10 0.1 "cgroup $c to empty" rmdir "$c" 2>/dev/null || true; done
    # only where no other node's Pods are
    rmdir /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/*/crio 2>/dev/null || true ;;
  *) die "usage: start DIR RUNTIME HOSTNAME [CLUSTER] | stop DIR | pid DIR | stop-all CLUSTER" ;;
esac
