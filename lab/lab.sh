#!/usr/bin/env bash
# The lab cluster: a real control plane started by kwokctl (binary runtime) with three fake nodes.
#   lab/lab.sh up [NAME]      start or reuse cluster NAME (default gpuop-lab); make its context current
#   lab/lab.sh down [NAME]    stop it and remove its state
#   lab/lab.sh status [NAME]  say what runs
# Environment: LAB_NODES (default "lab-node-0 lab-node-1 lab-node-2"), LAB_BIN_LINK (directory that
# gets kubectl and crictl symlinks, default /usr/local/bin; empty to skip).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-status}
name=${2:-gpuop-lab}
context=kwok-$name
nodes=${LAB_NODES:-lab-node-0 lab-node-1 lab-node-2}

log() { echo "lab[$name]: $*" >&2; }

bin=$("$here/build.sh" cluster)
crictl_bin=$("$here/build.sh" crictl)
export PATH=$bin:$PATH
# shellcheck source=versions.env
. "$here/versions.env"

reachable() {
  kubectl --context "$context" --request-timeout=3s get --raw /readyz >/dev/null 2>&1
}

exists() {
  kwokctl get clusters 2>/dev/null | grep -qx "$name"
}

# The stopped kwok controller's node leases outlive it; the new one manages a node only once it
# holds its lease, so it would leave Pods Pending until they expire. Drop them and wait until
# the running controller holds them again.
release_node_leases() {
  local k=(kubectl --context "$context" --namespace kube-node-lease) waited=0
  # shellcheck disable=SC2086
  "${k[@]}" delete lease $nodes --ignore-not-found >/dev/null
  # shellcheck disable=SC2086
  until "${k[@]}" get lease $nodes >/dev/null 2>&1; do
    if [ "$waited" -ge 120 ]; then
      log "the kwok controller took no node lease in 120s"
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  log "kwok holds the node leases again (${waited}s)"
}

create_cluster() {
  log "creating cluster: Kubernetes v$K8S_VERSION, etcd v$ETCD_VERSION, kwok v$KWOK_VERSION"
  KWOK_KUBE_VERSION=v$K8S_VERSION KWOK_KUBECTL_BINARY=$bin/kubectl \
    kwokctl create cluster --name "$name" --runtime binary \
    --node-lease-duration-seconds 8 \
    --etcd-binary "$bin/etcd" \
    --kube-apiserver-binary "$bin/kube-apiserver" \
    --kube-controller-manager-binary "$bin/kube-controller-manager" \
    --kube-scheduler-binary "$bin/kube-scheduler" \
    --kwok-controller-binary "$bin/kwok" \
    --timeout 3m --wait 3m >"$log_file" 2>&1 || { cat "$log_file" >&2; return 1; }
}

start_cluster() {
  log_file=$(mktemp)
  if reachable; then
    log "running (context $context)"
  elif exists; then
    # Its processes are gone (a new session, a reboot): stop clears their stale pid files.
    log "starting the stopped cluster"
    kwokctl stop cluster --name "$name" >"$log_file" 2>&1 || true
    kwokctl start cluster --name "$name" --timeout 2m --wait 2m >>"$log_file" 2>&1 || true
    if reachable; then
      release_node_leases
    else
      log "it did not come back; recreating it (the lab's state is disposable)"
      kwokctl delete cluster --name "$name" >>"$log_file" 2>&1 || true
      create_cluster
    fi
  else
    create_cluster
  fi
  rm -f "$log_file"
  reachable || { log "the cluster does not answer on context $context"; exit 1; }
  kubectl config use-context "$context" >/dev/null
}

node_manifests() {
  local n
  for n in $nodes; do
    cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: $n
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
YAML
  done
}

ensure_nodes() {
  local k=(kubectl --context "$context") n
  # Exactly the lab's nodes: drop strays, create the missing ones, reset their base capacity.
  for n in $("${k[@]}" get nodes -o name); do
    [[ " $nodes " == *" ${n#node/} "* ]] || { log "deleting stray $n"; "${k[@]}" delete "$n"; }
  done
  node_manifests | "${k[@]}" apply -f - >/dev/null
  local base='{"cpu":"8","memory":"32Gi","pods":"110"}'
  for n in $nodes; do
    "${k[@]}" patch node "$n" --subresource=status --type=merge \
      -p "{\"status\":{\"capacity\":$base,\"allocatable\":$base}}" | grep -v "no change" >&2 || true
  done
  # shellcheck disable=SC2046
  "${k[@]}" wait --for=condition=Ready --timeout=60s $(printf 'node/%s ' $nodes) >/dev/null
  log "nodes Ready: $nodes (context $context)"
}

link_tools() {
  local dir=${LAB_BIN_LINK-/usr/local/bin} tool
  [ -n "$dir" ] || return 0
  for tool in "$bin/kubectl" "$crictl_bin/crictl"; do
    if [ "$(readlink "$dir/${tool##*/}" 2>/dev/null)" != "$tool" ]; then
      ln -sfn "$tool" "$dir/${tool##*/}"
      log "${tool##*/} linked at $dir/${tool##*/}"
    fi
  done
}

case $cmd in
up)
  start_cluster
  ensure_nodes
  link_tools
  ;;
down)
  if exists; then
    kwokctl delete cluster --name "$name"
  else
    log "no such cluster"
  fi
  ;;
status)
  if reachable; then
    log "running, context $context, $(kubectl --context "$context" version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
    kwokctl get components --name "$name" 2>/dev/null || true
    kubectl --context "$context" get nodes
  elif exists; then
    log "stopped (state kept; 'up' starts it)"
  else
    log "absent"
  fi
  ;;
*)
  echo "usage: $0 up|down|status [NAME]" >&2
  exit 2
  ;;
esac
