#!/usr/bin/env bash
# The lab cluster: a real control plane started by kwokctl (binary runtime) with three fake nodes.
#   lab/lab.sh up [NAME]      start or reuse cluster NAME (default gpuop-lab), starting any of its
#                             components that is not running, and wait until it works; make its context current
#   lab/lab.sh heal [NAME]    its control plane only: start or continue any component that is not
#                             running, and wait until it works (its nodes as they are; those of a
#                             cluster made anew as `up` makes them)
#   lab/lab.sh down [NAME]    stop it, every lab containerd daemon, and remove its state
#   lab/lab.sh status [NAME]  say what runs, from the processes (exit 3 when a component is not running)
# Environment: LAB_NODES (default "lab-node-0 lab-node-1 lab-node-2"), LAB_BIN_LINK (directory that
# gets kubectl and crictl symlinks, default /usr/local/bin; empty to skip), LAB_DISTURBED_AT (seconds
# since the epoch when a component was disturbed from outside, an etcd restarted say: `up` then waits
# until the controllers renewed their leases after it, starting any that gave its lease up).
# The kubelet node (make run NODE=kubelet): LAB_KUBELET_NODE names the lab node a real kubelet runs instead of
# kwok (lab/kubeletnode.sh), on the lab containerd of root LAB_ROOT (default /root/gpuop) whose binary
# is LAB_CONTAINERD (default /usr/bin/containerd). Without it, `up` stops any kubelet node: the lab's
# nodes are all kwok's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-status}
name=${2:-gpuop-lab}
context=kwok-$name
nodes=${LAB_NODES:-lab-node-0 lab-node-1 lab-node-2}
real=${LAB_KUBELET_NODE:-}
[[ -z $real || " $nodes " == *" $real "* ]] || { echo "lab: LAB_KUBELET_NODE=$real: expected one of $nodes" >&2; exit 2; }
kwok_nodes=$(for n in $nodes; do [[ $n == "$real" ]] || echo "$n"; done | xargs)

log() { echo "lab[$name]: $*" >&2; }

bin=$("$here/build.sh" cluster)
crictl_bin=$("$here/build.sh" crictl)
export PATH=$bin:$PATH
# shellcheck source=versions.env
. "$here/versions.env"

cluster_dir=$HOME/.kwok/clusters/$name
# The kubeconfig that gets the cluster's context, made current there: kubectl's ($KUBECONFIG's
# first file). A second lab beside the first (make test) has a file of its own.
kubeconfig=${KUBECONFIG:-$HOME/.kube/config}
kubeconfig=${kubeconfig%%:*}
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok-controller"

# shellcheck source=proc.sh
. "$here/proc.sh"
quietly() { "$@" >/dev/null 2>&1; }

# The kernel's state of a process (S, R, T: stopped, Z: a zombie), nothing when it is gone.
proc_state() { sed 's/.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null || true; }

# component_pid C: the pid of component C (kwokctl's pids/C.pid, its binary bin/C) while its
# process runs: not a zombie, its own binary (a pid file outlives its process, a pid is reused).
component_pid() {
  local pid state argv0
  pid=$(cat "$cluster_dir/pids/$1.pid" 2>/dev/null) || return 1
  state=$(proc_state "$pid")
  [ -n "$state" ] && [ "$state" != Z ] || return 1
  argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1)
  [ "${argv0##*/}" = "$1" ] || return 1
  echo "$pid"
}

# The lab's rules, in Python (the tests use them too): its processes, found and stopped
# (lab/labproc.py); its nodes, capacity and controllers' leases (lab/labcluster.py).
labproc() { python3 "$here/labproc.py" "$@"; }
labcluster() { python3 "$here/labcluster.py" "$@"; }

reachable() {
  kubectl --context "$context" --request-timeout=3s get --raw /readyz >/dev/null 2>&1
}

# The list is read whole before it is searched: `kwokctl get clusters | grep -q` under pipefail
# failed now and then (grep left at the first match, and kwokctl died writing the next name on
# the closed pipe: the lab seemed absent and was made again, 8 times in 200 with four clusters).
exists() {
  local all
  all=$(kwokctl get clusters 2>/dev/null) || return 1
  grep -qx -- "$name" <<<"$all"
}

# The stopped kwok controller's node leases outlive it; the new one manages a node only once it
# holds its lease, so it would leave Pods Pending until they expire. Drop them and wait until
# the running controller holds them again.
release_node_leases() {
  local k=(kubectl --context "$context" --namespace kube-node-lease) start=$SECONDS
  # shellcheck disable=SC2086
  "${k[@]}" delete lease $nodes --ignore-not-found >/dev/null
  # shellcheck disable=SC2086
  wait_until 120 1 "the kwok controller to take the node leases" quietly "${k[@]}" get lease $nodes || return 1
  log "kwok holds the node leases again ($((SECONDS - start))s)"
}

# kwok manages only the nodes it was given (annotated), never a real kubelet's.
KWOK_SELECTOR=kwok.x-k8s.io/node=fake

# The API server reaches a real kubelet (a Pod's logs: the node audit's cluster reach) at its
# InternalIP, as a client of the cluster's CA: no lab node's name resolves.
APISERVER_TO_KUBELET="kubelet-preferred-address-types=InternalIP"  # one: kwokctl splits its --extra-args at commas

# The lab's own kwok stage (lab/read-pod-stage.yaml), beside kwokctl's defaults: kept under
# ~/.kwok, where the cluster is, so the controller finds it after the clone that made it is gone.
READ_POD_STAGE=$HOME/.kwok/gpuop-read-pod-stage.yaml
install_stage() {
  mkdir -p "${READ_POD_STAGE%/*}"
  cmp -s "$here/read-pod-stage.yaml" "$READ_POD_STAGE" || cp "$here/read-pod-stage.yaml" "$READ_POD_STAGE"
}

# A cluster made before kwok was told so (its controller manages every node), before its API
# server could reach a kubelet, or before its controller had the lab's stage, is made again.
made_current() {
  grep -q -- "--manage-nodes-with-annotation-selector=$KWOK_SELECTOR" "$cluster_dir/kwok.yaml" 2>/dev/null &&
    grep -q -- "$APISERVER_TO_KUBELET" "$cluster_dir/kwok.yaml" 2>/dev/null &&
    grep -q -- "$READ_POD_STAGE" "$cluster_dir/kwok.yaml" 2>/dev/null
}

# Each component's first --extra-args come first, in this order: kwokctl 0.8 files a component's
# later ones under the position of its first among all the flags (it panics otherwise).
# One cluster is made at a time on the host (flock): kwokctl picks a new cluster's ports among
# those no other cluster's saved config names, and two made at once picked the same port (seen:
# make test's two lanes, a kwok controller that could not bind and nodes never Ready). --close:
# the cluster's daemons, started by kwokctl, must not inherit the lock.
CREATE_LOCK=$HOME/.kwok/gpuop-create.lock
created=""
create_cluster() {
  created=yes
  log "creating cluster: Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION, kwok v$KWOK_VERSION"
  mkdir -p "${CREATE_LOCK%/*}"
  KWOK_KUBE_VERSION=v$K8S_VERSION KWOK_KUBECTL_BINARY=$bin/kubectl \
    flock --close -w 360 -E 75 "$CREATE_LOCK" \
    kwokctl create cluster --name "$name" --kubeconfig "$kubeconfig" --runtime binary \
    --node-lease-duration-seconds 8 \
    --etcd-binary "$bin/etcd" \
    --kube-apiserver-binary "$bin/kube-apiserver" \
    --kube-controller-manager-binary "$bin/kube-controller-manager" \
    --kube-scheduler-binary "$bin/kube-scheduler" \
    --kwok-controller-binary "$bin/kwok" \
    --extra-args kwok-controller=manage-all-nodes=false \
    --extra-args "kube-apiserver=$APISERVER_TO_KUBELET" \
    --extra-args "kwok-controller=manage-nodes-with-annotation-selector=$KWOK_SELECTOR" \
    --extra-args "kwok-controller=config=$READ_POD_STAGE" \
    --extra-args "kube-apiserver=kubelet-client-certificate=$cluster_dir/pki/admin.crt" \
    --extra-args "kube-apiserver=kubelet-client-key=$cluster_dir/pki/admin.key" \
    --timeout 3m --wait 3m >"$log_file" 2>&1 || {
    local rc=$?
    cat "$log_file" >&2
    [ "$rc" -ne 75 ] || log "another lab's cluster was being made for 360s ($CREATE_LOCK); gave up"
    return 1
  }
}

# Start each component that is not running (kwokctl starts only those whose pid file names no
# live process: a stale one is removed first); a stopped one (SIGSTOP) is continued.
# Once a component was down or stopped, the controllers' leases count only when renewed after
# that moment: a controller that lost touch with the API server meanwhile still looks fresh for
# a few seconds before it gives its lease up and exits (disturbed_at, in seconds since the epoch).
disturbed_at=${LAB_DISTURBED_AT:-}
heal_components() {
  local c pid down=()
  for c in $COMPONENTS; do
    if ! pid=$(component_pid "$c"); then
      down+=("$c")
    elif [ "$(proc_state "$pid")" = T ]; then
      log "$c (pid $pid) is stopped; continuing it"
      disturbed_at=${disturbed_at:-$(date +%s)}
      kill -CONT "$pid"
    fi
  done
  [ ${#down[@]} -eq 0 ] || disturbed_at=${disturbed_at:-$(date +%s)}
  if [ ${#down[@]} -eq 0 ]; then
    log "running (context $context)"
    return 0
  fi
  log "not running: ${down[*]}; starting them"
  for c in "${down[@]}"; do rm -f "$cluster_dir/pids/$c.pid"; done
  # No --wait: kwokctl would wait for every component it did not start too, and one that
  # exits meanwhile (it lost its lease) never gets ready; wait_working waits, and heals.
  kwokctl start cluster --name "$name" --timeout 2m >>"$log_file" 2>&1 || true
  for c in "${down[@]}"; do
    component_pid "$c" >/dev/null || { cat "$log_file" >&2; log "$c did not start"; return 1; }
  done
  # A new kwok controller manages a node only once it holds its lease: drop the old ones.
  if [[ " ${down[*]} " == *" kwok-controller "* ]] && reachable; then release_node_leases; fi
}

# The cluster works, not merely answers: the API server ready, and the scheduler and
# controller-manager holding their leader leases (each exits when it loses its lease), renewed
# after disturbed_at when a component was healed (lab/labcluster.py stale). What is missing is
# left in $missing.
missing=()
works() {
  local c
  missing=()
  if ! reachable; then
    missing=("kube-apiserver: not ready")
    return 1
  fi
  for c in kube-scheduler kube-controller-manager; do
    # one that gave its lease up meanwhile has exited: start it again (it does not start: no wait helps)
    component_pid "$c" >/dev/null || heal_components || { rm -f "$log_file"; exit 1; }
  done
  mapfile -t missing < <(labcluster stale "$context" "$disturbed_at" || true)
  [ ${#missing[@]} -eq 0 ]
}

wait_working() {
  wait_until 120 1 "the cluster to work" works ||
    { log "the cluster does not work: $(IFS=';'; echo "${missing[*]}")"; return 1; }
}

start_cluster() {
  log_file=$(mktemp)
  install_stage
  if exists && ! made_current; then
    log "made before kwok left kubelet nodes alone, its API server could reach a kubelet or kwok had the lab's stage; recreating it (the lab's state is disposable)"
    kwokctl delete cluster --name "$name" --kubeconfig "$kubeconfig" >>"$log_file" 2>&1 || true
  fi
  if ! exists; then
    create_cluster
  elif ! heal_components || ! wait_until 60 1 "its API server to answer again" reachable; then
    # (an API server just started takes seconds to answer: asked once at once, a busy machine's
    # made a healing lab anew, dropping every Node a test had registered in it)
    log "it did not come back; recreating it (the lab's state is disposable)"
    kwokctl delete cluster --name "$name" --kubeconfig "$kubeconfig" >>"$log_file" 2>&1 || true
    create_cluster
  fi
  wait_working || { rm -f "$log_file"; exit 1; }
  rm -f "$log_file"
  kubectl config use-context "$context" >/dev/null
}

ensure_nodes() {
  local k=(kubectl --context "$context") n
  # Exactly the lab's nodes: drop strays (a kubelet node's object too, where kwok is to run it),
  # create the missing ones, reset their base capacity.
  local fake='{range .items[*]}{.metadata.name}={.metadata.annotations.kwok\.x-k8s\.io/node}{"\n"}{end}'
  while IFS='=' read -r n mark; do
    [[ -n $n && $n != "$real" ]] || continue
    if [[ " $kwok_nodes " != *" $n "* ]]; then
      log "deleting stray node/$n"; "${k[@]}" delete node "$n"
    elif [[ $mark != fake ]]; then
      log "deleting node/$n, a real kubelet's: kwok runs it"; "${k[@]}" delete node "$n"
    fi
  done < <("${k[@]}" get nodes -o jsonpath="$fake")
  # shellcheck disable=SC2086
  labcluster nodes $kwok_nodes | "${k[@]}" apply -f - >/dev/null
  local base
  base=$(labcluster capacity)
  for n in $kwok_nodes; do
    "${k[@]}" patch node "$n" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":$base,\"allocatable\":$base}}" | grep -v "no change" >&2 || true
  done
  # shellcheck disable=SC2046
  "${k[@]}" wait --for=condition=Ready --timeout=60s $(printf 'node/%s ' $kwok_nodes) >/dev/null
  log "kwok's nodes Ready: $kwok_nodes (context $context)"
}

# The kubelet node (LAB_KUBELET_NODE) up, or every kubelet node stopped where the lab has none.
kubelet_node() {
  if [[ -z $real ]]; then
    "$here/kubeletnode.sh" stop-all "$name"
  else  # one kubelet node: another root's would register the same node
    "$here/kubeletnode.sh" stop-all "$name" "${LAB_ROOT:-/root/gpuop}"
    "$here/kubeletnode.sh" up "${LAB_ROOT:-/root/gpuop}" "$real" "${LAB_CONTAINERD:-/usr/bin/containerd}" "$name"
  fi
}

# Each link made beside and renamed over the old one (one rename): two labs coming up at once
# (make test's lanes) never see one missing, nor fail on the other's.
link_tools() {
  local dir=${LAB_BIN_LINK-/usr/local/bin} tool
  [ -n "$dir" ] || return 0
  for tool in "$bin/kubectl" "$crictl_bin/crictl"; do
    if [ "$(readlink "$dir/${tool##*/}" 2>/dev/null)" != "$tool" ]; then
      ln -sfn "$tool" "$dir/.${tool##*/}.$$" && mv -Tf "$dir/.${tool##*/}.$$" "$dir/${tool##*/}"
      log "${tool##*/} linked at $dir/${tool##*/}"
    fi
  done
}

case $cmd in
up | heal)
  start_cluster
  # heal: the nodes as they are (a test's kubelet or simulated nodes stay registered), unless
  # the cluster had to be made anew
  [[ $cmd == up || -n $created ]] || exit 0
  [[ -n $real ]] || kubelet_node  # before kwok's nodes: a real kubelet's node object goes first
  ensure_nodes
  [[ -z $real ]] || kubelet_node
  link_tools
  ;;
down)
  # Every lab containerd daemon on the host but those started for another lab or inside its real
  # node (lab/labproc.py daemons), and this lab's nodes.
  # shellcheck disable=SC2046
  labproc stop "lab containerd daemons" $(labproc daemons "$name")
  "$here/simnode.sh" stop-all "$name"  # simulated nodes a test left behind, with their namespaces
  "$here/kubeletnode.sh" stop-all "$name"  # the lab's kubelet node, its kubelet and namespace
  if exists; then
    mapfile -t left < <(pgrep -f -- "$cluster_dir/" || true)
    kwokctl delete cluster --name "$name" --kubeconfig "$kubeconfig"
    # What kwokctl could not stop (a stopped process ignores its TERM until continued).
    labproc stop "leftovers of the cluster" "${left[@]}"
  else
    log "no such cluster"
  fi
  ;;
status)
  if ! exists; then
    log "absent"
    exit 0
  fi
  down=0
  for c in $COMPONENTS; do
    if pid=$(component_pid "$c"); then
      log "$c: running, pid $pid$([ "$(proc_state "$pid")" != T ] || echo ', stopped (SIGSTOP)')"
    else
      log "$c: NOT RUNNING"
      down=1
    fi
  done
  for pid in $(labproc daemons "$name"); do
    log "lab containerd: pid $pid, $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
  done
  if reachable; then
    log "API: answers on context $context, $(kubectl --context "$context" version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
    kubectl --context "$context" --request-timeout=5s get nodes
  else
    log "API: does not answer on context $context ('up' starts what is not running)"
  fi
  [ "$down" -eq 0 ] || exit 3
  ;;
*)
  echo "usage: $0 up|heal|down|status [NAME]" >&2
  exit 2
  ;;
esac
