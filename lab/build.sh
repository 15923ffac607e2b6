#!/usr/bin/env bash
# Build the lab's pinned binaries from their Go modules into caches outside the repo, one folder
# per component and version. Prints that component's bin directory. Rebuilds only what is missing.
#   lab/build.sh [cluster]  kube-apiserver, -controller-manager, -scheduler, kubectl, etcd, kwok, kwokctl
#                           -> ~/.cache/gpuop-lab/k8s-1.36.3_kwok-0.8.0_etcd-3.6.8/bin
#   lab/build.sh kubelet    -> ~/.cache/gpuop-lab/kubelet-1.36.3/bin (the kubelet node's agent)
#   lab/build.sh crictl     -> ~/.cache/gpuop-lab/cri-tools-1.37.0/bin
#   lab/build.sh containerd V (a containerd of CONTAINERD_VERSIONS for the lab node) -> ~/.cache/gpuop-lab/containerd-V/bin
#   lab/build.sh containerds (every one of them; prints nothing)
#   lab/build.sh shim V     its runc shim, beside it (the kubelet node runs Pods: lab/kubeletnode.sh) -> the same bin
#   lab/build.sh multicall V  a k3s-like multicall of that containerd (lab/multicall), as k3s with a
#                           containerd symlink to it -> ~/.cache/gpuop-lab/multicall-V-<source hash>/bin
#   lab/build.sh nvidia-ctk [V] (V one of NVIDIA_CTK_VERSIONS, NVIDIA_CTK_VERSION by default)
#                           -> ~/.cache/gpuop-lab/nvidia-ctk-V-stamped/bin (nvidia-ctk, nvidia-ctk-installer)
#   lab/build.sh crio       -> ~/.cache/gpuop-lab/cri-o-CRIO_VERSION/bin (crio: CRI-O, with no gpgme, btrfs
#                           or devicemapper headers needed; pinns, its namespace helper)
#   lab/build.sh crio-import -> ~/.cache/gpuop-lab/cri-o-import-CRIO_VERSION-<source hash>/bin (crio-import: an
#                           image into CRI-O's store, since nothing can be pulled; lab/crioimport)
#   lab/build.sh standin    -> ~/.cache/gpuop-lab/standin-<source hash>/bin (the kubelet node's stand-in images' program)
#   lab/build.sh crds       -> ~/.cache/gpuop-lab/crds-prometheus-operator-V/bin (its PrometheusRule and
#                           ServiceMonitor CRDs, from its module: the agent's chart is tried against the lab's API server)
#   lab/build.sh runc       -> ~/.cache/gpuop-lab/runc-RUNC_VERSION/bin (runc, static: the GPU proof's kit)
#   lab/build.sh helm       -> ~/.cache/gpuop-lab/helm-HELM_VERSION/bin (helm: the agent's chart)
#   lab/build.sh promtool   -> ~/.cache/gpuop-lab/promtool-PROMETHEUS_VERSION/bin (promtool: its alert rules' tests)
#   lab/build.sh kube-state-metrics -> ~/.cache/gpuop-lab/kube-state-metrics-V/bin (the conditions as series)
#   lab/build.sh ctr V      containerd V's ctr, beside it (the GPU proof imports its images with it)
#   lab/build.sh agent-site  the node agent's pinned dependencies (pyproject.toml), installed for its image
#                           -> ~/.cache/gpuop-lab/agent-site-<their hash>/site
#   lab/build.sh agent-image the node agent's image, no pull (lab/agentimage.py): Debian's Python, nsenter, those
#                           and the project's wheel -> ~/.cache/gpuop-lab/agent-image/gpuop-agent.tar
#   lab/build.sh gpu-kit    the GPU proof's kit, a folder (bench/gpu/proof.sh; docs/gpu-proof.md): the
#                           runtimes of its stages, crictl, ctr, runc, the toolkit, CRI-O, its images, the node
#                           read -> ~/.cache/gpuop-lab/gpu-kit/kit
#   lab/build.sh gpu-kit-archive  that folder as one file, the same bytes for the same inputs
#                           -> ~/.cache/gpuop-lab/gpu-kit/gpuop-gpu-kit.tar.xz
#   lab/build.sh all        everything `make test` needs (prints nothing)
# Each build prints one line with its elapsed time; the Go tool's output goes to build.log in the
# cache, whose tail is printed only when a build fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

component=${1:-cluster}
cache_root=${GPUOP_LAB_CACHE:-$HOME/.cache/gpuop-lab}
usage="usage: $0 [cluster|kubelet|crictl|crio|crio-import|helm|promtool|kube-state-metrics|containerd VERSION|shim VERSION|ctr VERSION|multicall VERSION|containerds|nvidia-ctk [CTK]|standin|crds|runc|gpu-kit|gpu-kit-archive|agent-site|agent-image|all]; VERSION one of: $CONTAINERD_VERSIONS; CTK one of: $NVIDIA_CTK_VERSIONS"
case $component in
cluster) cache=$cache_root/k8s-${K8S_VERSION}_kwok-${KWOK_VERSION}_etcd-${ETCD_VERSION} ;;
kubelet) cache=$cache_root/kubelet-$K8S_VERSION ;;
crictl) cache=$cache_root/cri-tools-$CRICTL_VERSION ;;
crio) cache=$cache_root/cri-o-$CRIO_VERSION ;;
crio-import) cache=$cache_root/cri-o-import-$CRIO_VERSION-$(sha256sum "$here/crioimport/main.go" | cut -c1-12) ;;
nvidia-ctk)
  ctk_version=${2:-$NVIDIA_CTK_VERSION}
  [[ " $NVIDIA_CTK_VERSIONS " == *" $ctk_version "* ]] || { echo "$usage" >&2; exit 2; }
  cache=$cache_root/nvidia-ctk-$ctk_version-stamped  # its version stamped, as NVIDIA's release builds stamp it
  ;;
standin) cache=$cache_root/standin-$(sha256sum "$here/standin/standin.c" | cut -c1-12) ;;
crds) cache=$cache_root/crds-prometheus-operator-$PROMETHEUS_OPERATOR_VERSION ;;
runc) cache=$cache_root/runc-$RUNC_VERSION ;;
helm) cache=$cache_root/helm-$HELM_VERSION ;;
promtool) cache=$cache_root/promtool-$PROMETHEUS_VERSION-no-sd ;;
kube-state-metrics) cache=$cache_root/kube-state-metrics-$KUBE_STATE_METRICS_VERSION ;;
agent-site) cache=$cache_root/agent-site-$(grep '^dependencies' "$here/../pyproject.toml" | sha256sum | cut -c1-12) ;;
agent-image) cache=$cache_root/agent-image ;;
gpu-kit | gpu-kit-archive) cache=$cache_root/gpu-kit ;;
containerd | shim | multicall | ctr)
  containerd_version=${2:-}
  [[ " $CONTAINERD_VERSIONS " == *" $containerd_version "* ]] || { echo "$usage" >&2; exit 2; }
  cache=$cache_root/containerd-$containerd_version
  if [ "$component" = multicall ]; then
    [ "${containerd_version%%.*}" -ge 2 ] || { echo "lab/build: multicall needs a containerd 2.x" >&2; exit 2; }
    cache=$cache_root/multicall-$containerd_version-$(sha256sum "$here/multicall/main.go" | cut -c1-12)
  fi
  ;;
containerds)
  for v in $CONTAINERD_VERSIONS; do "$0" containerd "$v" >/dev/null; done
  exit 0
  ;;
all)
  # In the order the tests beside the lab's ask for them (they start as soon as the cluster is
  # up; what is not built yet, a test builds itself, at the same time): crictl (lab.sh up needs
  # it), kubelet (it reuses their compiled packages from Go's build cache), the agent image's
  # Python packages (tests/nodes/test_agent_pod.py), the kubelet node's
  # (tests/kubeletnode: the newest containerd and its shim), the simulated nodes' (tests/nodes:
  # k3s's multicall, CRI-O, then the containerds they run), then every other containerd, which
  # only the version matrices need, then the rest of the GPU proof's kit (tests/gpu), then the agent
  # chart's tools (helm, kube-state-metrics, promtool: a test that comes first builds its own). Two
  # builds side by side were measured no faster here: the builds are CPU-bound.
  newest=${CONTAINERD_VERSIONS##* }
  ctks=""
  for v in $NVIDIA_CTK_VERSIONS; do ctks+=" nvidia-ctk:$v"; done
  # shellcheck disable=SC2086 # word lists
  for c in cluster crictl crds kubelet standin agent-site $ctks "containerd:$newest" "shim:$newest" "multicall:$newest" \
      crio crio-import containerd:1.7.35 containerd:2.0.14 containerd:2.2.9 containerd:2.3.3 containerds \
      runc "ctr:$newest" shim:1.7.35 shim:2.3.3 helm kube-state-metrics promtool; do
    "$0" ${c/:/ } >/dev/null
  done
  exit 0
  ;;
*) echo "$usage" >&2; exit 2 ;;
esac
bin=$cache/bin
mkdir -p "$bin"
# One build per cache at a time: the two lanes of `make test` may ask for the same binary at
# once; the second waits for the first, then finds it built.
exec 9>"$cache/.lock"
flock -w 1800 9 || { echo "lab/build: $cache: another build held it for 30 minutes" >&2; exit 1; }
build_log=$cache/build.log
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "lab/build: $*" >&2; }

have_all() {
  local b
  for b in "$@"; do [ -x "$bin/$b" ] || return 1; done
}

# built WHAT FUNCTION: run FUNCTION with the Go tool's chatter in the build log, then say how long
# it took; on failure show the log's tail and stop.
built() {
  local what=$1 start=$SECONDS
  log "building $what ..."
  if ! "${@:2}" >>"$build_log" 2>&1; then
    log "building $what FAILED after $((SECONDS - start))s; the end of $build_log:"
    tail -n 30 "$build_log" >&2
    exit 1
  fi
  log "built $what in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s"
}

# A throwaway wrapper module lets `go build` pick main packages out of modules whose own go.mod
# carries local replace directives (which `go install pkg@version` refuses).
wrapper() {
  local dir=$cache/src/$1
  rm -rf "$dir" && mkdir -p "$dir"
  printf 'module gpuop.lab/%s\n\ngo 1.26.0\n' "$1" >"$dir/go.mod"
  echo "$dir"
}

build_kubernetes() {  # the commands named, e.g. kube-apiserver kubectl
  local dir mod minor ldflags=""
  dir=$(wrapper kubernetes)
  mod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes replaces each staging module with ./staging/...; pin each to its v0.x release.
  {
    echo 'replace ('
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v0.'"${K8S_VERSION#1.}"'#p' "$mod"
    echo ')'
  } >>"$dir/go.mod"
  minor=${K8S_VERSION#1.}; minor=${minor%%.*}
  local pkgs=("${@/#/k8s.io/kubernetes/cmd/}")
  cd "$dir"
  go get "${pkgs[@]/%/@v$K8S_VERSION}"
  local v
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  done
  go build -trimpath -ldflags "-s -w$ldflags" -o "$bin/" "${pkgs[@]}"
}

build_etcd() {
  cd "$(wrapper etcd)"
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  GOBIN=$bin go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@v$KWOK_VERSION"
}

build_crictl() {
  GOBIN=$bin go install -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=v$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION"
}

# A writable copy of CRI-O's module, where its packages build: `go install` is refused here (its
# version list is not served) and its go.mod carries replace directives.
crio_module() {
  local dir src
  dir=$(wrapper crio)
  src=$(cd "$dir" && go mod download -json "github.com/cri-o/cri-o@v$CRIO_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cp -r "$src" "$dir/cri-o" && chmod -R u+w "$dir/cri-o"
  echo "$dir/cri-o"
}

# The tags drop what needs C headers this machine has no package for (gpgme: the openpgp signature
# code in Go instead; btrfs, devicemapper); seccomp is off (no libseccomp-dev): the lab's Pods need no profile.
CRIO_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"

build_crio() {
  cd "$(crio_module)"
  CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -tags "$CRIO_TAGS" -o "$bin/crio" ./cmd/crio
  # pinns, the C helper crio runs to pin a Pod's namespaces, from the same module (its Makefile's flags)
  gcc -std=c99 -Os -Wall -static -o "$bin/pinns" pinns/src/*.c
}

build_crio_import() {  # inside CRI-O's module: the daemon's own image and storage libraries
  cd "$(crio_module)"
  mkdir -p cmd/gpuop-crio-import && cp "$here/crioimport/main.go" cmd/gpuop-crio-import/
  CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" -tags "$CRIO_TAGS" -o "$bin/crio-import" ./cmd/gpuop-crio-import
}

build_nvidia_ctk() {  # the CLI, the GPU Operator's installer, the runtime and its CDI hook, of one release
  # cgo on: NVML's bindings are cgo (dlopen'ed at run time; nothing of it is needed to configure).
  local m=github.com/NVIDIA/nvidia-container-toolkit/cmd
  CGO_ENABLED=1 GOBIN=$bin go install -trimpath \
    -ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=$ctk_version" \
    "$m/nvidia-ctk@v$ctk_version" "$m/nvidia-ctk-installer@v$ctk_version" \
    "$m/nvidia-container-runtime@v$ctk_version" "$m/nvidia-cdi-hook@v$ctk_version"
}

build_agent_site() {  # from PyPI, as the image's pip would install them
  local python=${PYTHON:-$here/../.venv/bin/python}
  # shellcheck disable=SC2046 # one requirement a word
  timeout -k 10 900 "$python" -m pip install --quiet --disable-pip-version-check --no-compile --target "$cache/site.new" \
    $("$python" -c 'import sys, tomllib; print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
      "$here/../pyproject.toml")
  rm -rf "$cache/site" && mv "$cache/site.new" "$cache/site"
}

build_runc() {  # static (no libseccomp: the proof's containers ask no profile), runs on any distribution
  cd "$(wrapper runc)"
  go get "github.com/opencontainers/runc@v$RUNC_VERSION"
  CGO_ENABLED=1 go build -trimpath -tags "netgo osusergo" \
    -ldflags "-s -w -X main.version=$RUNC_VERSION -extldflags -static" -o "$bin/runc" github.com/opencontainers/runc
}

build_containerd() {  # CMD: containerd, containerd-shim-runc-v2 or ctr
  # Through a wrapper module for every version: `go install` refuses 1.7.15+ and 2.0.2-2.2.0,
  # whose go.mod has `exclude`. cgo on, as containerd's own release builds; no_btrfs: no btrfs
  # headers needed. The version is stamped as containerd's release builds stamp it.
  local v=$containerd_version mod=github.com/containerd/containerd
  [ "${v%%.*}" -ge 2 ] && mod=$mod/v2
  cd "$(wrapper "containerd-$v")"
  go get "$mod/cmd/$1@v$v"
  CGO_ENABLED=1 go build -trimpath -tags no_btrfs -ldflags "-s -w -X $mod/version.Version=v$v" \
    -o "$bin/$1" "$mod/cmd/$1"
}

build_multicall() {  # k3s's layout: bin/k3s, and bin/containerd a symlink to it
  local v=$containerd_version
  cd "$(wrapper "multicall-$v")"
  cp "$here/multicall/main.go" .
  go get "github.com/containerd/containerd/v2/cmd/containerd@v$v"
  ln -sfn k3s "$bin/containerd"
  CGO_ENABLED=1 go build -trimpath -tags no_btrfs \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v$v" -o "$bin/k3s" .
}

build_crds() {  # a file of the module, nothing built: the module zip holds its example CRDs
  local src
  src=$(cd "$(wrapper crds)" && go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  install -m 644 "$src/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" \
    "$src/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$bin/"
}

build_helm() {
  GOBIN=$bin go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
}

# Prometheus' module carries replace directives: built through a wrapper. With its documented
# remove_all_sd tag (plugins/: no cloud's service discovery, which the rules' check and unit
# tests never use): 163 s of CPU instead of 418 on an empty build cache (docs/benchmarks.md).
build_promtool() {
  local dir
  dir=$(wrapper promtool)
  (cd "$dir" && go get "github.com/prometheus/prometheus/cmd/promtool@v$PROMETHEUS_VERSION" &&
    go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$bin/promtool" github.com/prometheus/prometheus/cmd/promtool)
}

build_kube_state_metrics() {
  GOBIN=$bin go install -trimpath -ldflags "-s -w" "k8s.io/kube-state-metrics/v2@v$KUBE_STATE_METRICS_VERSION"
}

build_standin() {  # static: it runs alone in an image
  gcc -static -O2 -Wall -o "$bin/standin" "$here/standin/standin.c"
}

case $component in
cluster)
  have_all kwok kwokctl || built "kwok and kwokctl v$KWOK_VERSION" build_kwok
  have_all etcd || built "etcd v$ETCD_VERSION" build_etcd
  have_all kube-apiserver kube-controller-manager kube-scheduler kubectl ||
    built "Kubernetes v$K8S_VERSION (apiserver, controller-manager, scheduler, kubectl)" \
      build_kubernetes kube-apiserver kube-controller-manager kube-scheduler kubectl
  ;;
kubelet) have_all kubelet || built "kubelet v$K8S_VERSION" build_kubernetes kubelet ;;
crictl) have_all crictl || built "crictl v$CRICTL_VERSION" build_crictl ;;
crio) have_all crio pinns || built "CRI-O v$CRIO_VERSION" build_crio ;;
crio-import) have_all crio-import || built "crio-import (CRI-O v$CRIO_VERSION's image libraries)" build_crio_import ;;
nvidia-ctk) have_all nvidia-ctk nvidia-ctk-installer nvidia-container-runtime nvidia-cdi-hook ||
  built "the NVIDIA container toolkit v$ctk_version (nvidia-ctk, its installer, runtime and CDI hook)" build_nvidia_ctk ;;
runc) have_all runc || built "runc v$RUNC_VERSION" build_runc ;;
helm) have_all helm || built "helm v$HELM_VERSION" build_helm ;;
promtool) have_all promtool || built "promtool v$PROMETHEUS_VERSION" build_promtool ;;
kube-state-metrics) have_all kube-state-metrics ||
  built "kube-state-metrics v$KUBE_STATE_METRICS_VERSION" build_kube_state_metrics ;;
gpu-kit) "$here/gpukit.sh" "$cache/kit" >&2 ;;
agent-site)
  [ -d "$cache/site" ] || built "the node agent's dependencies" build_agent_site
  echo "$cache/site"
  exit 0 ;;
agent-image)  # the project as its wheel installs it, then the archive
  site=$("$0" agent-site)
  python=${PYTHON:-$here/../.venv/bin/python}
  rm -rf "$cache/project" && timeout -k 10 900 "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$cache/project" "$here/.." >>"$build_log" 2>&1 ||
    { tail -n 20 "$build_log" >&2; exit 1; }
  rm -rf "$here/../build"  # setuptools' own leftovers in the repository
  python3 "$here/agentimage.py" "$cache/gpuop-agent.tar" docker.io/library/gpuop-agent:0.1.0 "$site" "$cache/project"
  echo "$cache/gpuop-agent.tar"
  exit 0 ;;
gpu-kit-archive)  # under the same lock: the folder assembled anew, then packed where it changed
  "$here/gpukit.sh" "$cache/kit" >&2
  python3 "$here/gpukit.py" "$cache/kit" "$cache/gpuop-gpu-kit.tar.xz" >&2
  echo "$cache/gpuop-gpu-kit.tar.xz"
  exit 0 ;;
standin) have_all standin || built "the stand-in program" build_standin ;;
crds) [ -f "$bin/monitoring.coreos.com_prometheusrules.yaml" ] && [ -f "$bin/monitoring.coreos.com_servicemonitors.yaml" ] ||
  built "prometheus-operator v$PROMETHEUS_OPERATOR_VERSION's PrometheusRule and ServiceMonitor CRDs" build_crds ;;
containerd) have_all containerd || built "containerd v$containerd_version" build_containerd containerd ;;
shim) have_all containerd-shim-runc-v2 || built "containerd v$containerd_version's runc shim" build_containerd containerd-shim-runc-v2 ;;
ctr) have_all ctr || built "containerd v$containerd_version's ctr" build_containerd ctr ;;
multicall) have_all k3s || built "a k3s-like multicall of containerd v$containerd_version" build_multicall ;;
esac
rm -rf "$cache/src"
if [ "$component" = gpu-kit ]; then echo "$cache/kit"; else echo "$bin"; fi
