#!/usr/bin/env bash
# Build the lab's pinned binaries from their Go modules into a cache outside the repo.
# Prints the bin directory. Rebuilds only what is missing.
#   lab/build.sh            -> ~/.cache/gpuop-lab/k8s-1.36.3_kwok-0.8.0_etcd-3.6.8/bin
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

cache_root=${GPUOP_LAB_CACHE:-$HOME/.cache/gpuop-lab}
cache=$cache_root/k8s-${K8S_VERSION}_kwok-${KWOK_VERSION}_etcd-${ETCD_VERSION}
bin=$cache/bin
mkdir -p "$bin"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "lab/build: $*" >&2; }

have_all() {
  local b
  for b in "$@"; do [ -x "$bin/$b" ] || return 1; done
}

# A throwaway wrapper module lets `go build` pick main packages out of modules whose own go.mod
# carries local replace directives (which `go install pkg@version` refuses).
wrapper() {
  local dir=$cache/src/$1
  rm -rf "$dir" && mkdir -p "$dir"
  printf 'module gpuop.lab/%s\n\ngo 1.26.0\n' "$1" >"$dir/go.mod"
  echo "$dir"
}

build_kubernetes() {
  have_all kube-apiserver kube-controller-manager kube-scheduler kubectl && return
  log "building Kubernetes v$K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl); cold: about 5 min on 2 cores"
  local dir mod minor
  dir=$(wrapper kubernetes)
  mod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes replaces each staging module with ./staging/...; pin each to its v0.x release.
  {
    echo 'replace ('
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v0.'"${K8S_VERSION#1.}"'#p' "$mod"
    echo ')'
  } >>"$dir/go.mod"
  minor=${K8S_VERSION#1.}; minor=${minor%%.*}
  local pkgs=(k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl})
  (
    cd "$dir"
    go get "${pkgs[@]/%/@v$K8S_VERSION}" >&2
    local v
    for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    done
    go build -trimpath -ldflags "-s -w$ldflags" -o "$bin/" "${pkgs[@]}"
  )
}

build_etcd() {
  have_all etcd && return
  log "building etcd v$ETCD_VERSION"
  local dir
  dir=$(wrapper etcd)
  (
    cd "$dir"
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >&2
    go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
  )
}

build_kwok() {
  have_all kwok kwokctl && return
  log "building kwok and kwokctl v$KWOK_VERSION"
  GOBIN=$bin go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@v$KWOK_VERSION"
}

build_kwok
build_etcd
build_kubernetes
rm -rf "$cache/src"
echo "$bin"
