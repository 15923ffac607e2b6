#!/usr/bin/env bash
# The judgment held against a GPU (docs/gpu-proof.md): the incident's states, each on a runtime
# of the kit (lab/build.sh gpu-kit), with Pods through CRI (host network, no CNI); in each stage
# the node audit's own read of the node (the kit's node-read.sh: the command the fleet audit
# sends) and what the GPU did. bench/gpu/judge.py then judges each read with the cluster objects
# its stage stands for, and holds the verdict against the GPU.
#
#   sudo bench/gpu/proof.sh KIT OUT [--stand-in]
#
# KIT: the kit's archive, or its folder. OUT: a folder per stage (read.txt: the node read;
# observed: what the GPU did; the daemons' logs). Needs root and, on a GPU machine, the NVIDIA
# driver; nothing else. Every stage runs under /tmp/gpuop-gpu-proof, in mount, PID and UTS
# namespaces of its own (nothing it starts outlives it), every command under a deadline; the
# CDI spec and the toolkit's config are there too. --stand-in, where no GPU is: the lab's own
# CDI spec hands a container the GPU's device node (/dev/nvidia0) and a stand-in nvidia-smi
# (lab/standin/nvidia-smi) that names a GPU only where that node is.
set -euo pipefail

W=/tmp/gpuop-gpu-proof        # every stage's files, the kit unpacked, the CDI spec, the toolkit's config
CGROUP=gpuop-gpu-proof        # the containers' cgroup parent: removed at the end
SCENE_S=300                   # a scene (its daemons, Pods and reads) past this is killed, and fails
NODE=gpu-node                 # the node's name (its hostname): the Node of the stages' cluster objects
PROBE_IMAGE=gpuop.io/gpu-probe:1  # busybox and a glibc (lab/standin/images.py)

die() { echo "bench/gpu/proof.sh: $*" >&2; exit 1; }
say() { echo "gpu-proof: $*" >&2; }

# wait_until SECONDS WHAT COMMAND...: poll COMMAND every 0.2 s; false after SECONDS.
wait_until() {
  local end=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || { say "gave up waiting for $what"; return 1; }
    sleep 0.2
  done
}

# --- inside a scene: namespaces of its own (scene, below) ---------------------------------

cri() {
  timeout -k 2 40 "$KIT/bin/crictl" --config /dev/null --runtime-endpoint "unix://$sock" \
    --image-endpoint "unix://$sock" --timeout 30s "$@"
}

# observe STAGE WORDS...: one line of what the GPU did, for the judge.
observe() { mkdir -p "$OUT/$1"; echo "${*:2}" >>"$OUT/$1/observed"; }

# read_node STAGE: the node audit's read, as the fleet audit sends it, into OUT/STAGE/read.txt.
read_node() {
  mkdir -p "$OUT/$1"
  PATH=$KIT/bin:$PATH timeout -k 5 120 sh "$KIT/node-read.sh" >"$OUT/$1/read.txt" 2>"$OUT/$1/read.err" ||
    say "$1: the node read exited $?"
}

answers() { cri info >/dev/null 2>&1; }
alive() { kill -0 "$1" 2>/dev/null; }

# start_daemon NAME COMMAND...: started with its output in $d/NAME.log; true once its CRI answers
# on $sock, false with its last words if it exits or stalls (then killed) first.
start_daemon() {
  local name=$1 end=$((SECONDS + 30))
  shift
  setsid "$@" </dev/null >>"$d/$name.log" 2>&1 &
  daemon=$!
  while ! answers; do
    if ! alive "$daemon"; then
      wait "$daemon" 2>/dev/null || true
      why=$(grep -v "^\s*$" "$d/$name.log" | tail -n 1 | cut -c1-300)
      return 1
    fi
    if [ $SECONDS -ge $end ]; then
      why="its CRI did not answer in 30s"
      stop_daemon
      return 1
    fi
    sleep 0.2
  done
}

stop_daemon() {
  [ -n "${daemon:-}" ] || return 0
  kill -TERM "$daemon" 2>/dev/null || true
  wait_until 15 "pid $daemon to stop" bash -c "! kill -0 $daemon" || kill -KILL "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  daemon=
}

# start_containerd VERSION: the kit's containerd VERSION on $d/etc/config.toml, its runc shim
# and runc first on PATH, the toolkit's runtime configured by $W/toolkit/config.toml.
start_containerd() {
  local bin=$KIT/containerd-$1
  sock=$d/containerd.sock
  PATH=$bin:$KIT/bin:$PATH NVIDIA_CTK_CONFIG_FILE_PATH=$W/toolkit/config.toml \
    start_daemon containerd "$bin/containerd" --config "$d/etc/config.toml" --root "$d/root" \
    --state "$d/state" --address "$sock"
}

# containerd_config VERSION: the node's main config: its drop-ins under conf.d, its Pods'
# snapshots on the native snapshotter (any /tmp holds it), the GPU's CDI spec where it reads, and
# no sandbox's oom_score_adj below the daemon's own (a machine that runs the proof in a container
# refuses to lower it, and runc then fails every sandbox).
containerd_config() {
  local version=3 cri='plugins."io.containerd.cri.v1.runtime"' images='plugins."io.containerd.cri.v1.images"'
  if [ "${1%%.*}" -lt 2 ]; then version=2 cri='plugins."io.containerd.grpc.v1.cri"' images="$cri.containerd"; fi
  mkdir -p "$d/etc/conf.d"
  cat >"$d/etc/config.toml" <<EOF
version = $version
imports = ["$d/etc/conf.d/*.toml"]

[$cri]
  cdi_spec_dirs = ["$W/cdi"]
  restrict_oom_score_adj = true

[$images]
  snapshotter = "native"
EOF
}

# nvidia_dropin VERSION: a drop-in of the handler nvidia (the kit's toolkit runtime), in the
# config version VERSION, as the toolkit's CRI section writes it for containerd 2.x.
nvidia_dropin() {
  mkdir -p "$d/etc/conf.d"
  cat >"$d/etc/conf.d/99-nvidia.toml" <<EOF
version = $1

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
  BinaryName = "$KIT/bin/nvidia-container-runtime"
EOF
}

# containerd_up VERSION: the kit's containerd VERSION started on its main config, with the kit's
# images (nothing is pulled) on the snapshotter its CRI uses.
containerd_up() {
  containerd_config "$1"
  start_containerd "$1" || die "containerd $1 did not start: $why"
  timeout -k 2 60 "$KIT/bin/ctr" --address "$sock" --namespace k8s.io images import --local \
    --snapshotter native "$KIT/images.tar" >>"$d/import.log" 2>&1
}

# run_pod NAME HANDLER ASK: a host-network Pod of runtime handler HANDLER (empty: the daemon's
# default), one container of the probe image that runs nvidia-smi -L, then waits (TERM ends it:
# as PID 1 of its namespace it has no default action for it). ASK: how it
# asks for the GPU: env (NVIDIA_VISIBLE_DEVICES=all, what the toolkit's runtime reads), cdi
# (CRI's CDI field: nvidia.com/gpu=all), none. Prints its outcome: "refused WORDS" (its sandbox
# or container refused), "gpu LINE" (nvidia-smi named a GPU), "none WORDS" (it ran without one).
run_pod() {
  local name=$1 handler=$2 ask=$3 log=$d/logs/$1/ctr.log envs="[]" cdi="[]"
  case $ask in
  env) envs='[{"key": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]' ;;
  cdi) cdi='[{"name": "nvidia.com/gpu=all"}]' ;;
  esac
  pod_config "$name" "$name" '["/bin/sh", "-c", "trap \"exit 0\" TERM; nvidia-smi -L 2>&1; sleep 3600 & wait"]' "$envs" "$cdi"
  started "$name" "$handler" || { echo "refused $why"; return 0; }
  wait_until 30 "$name's first words" grep -q . "$log" || true
  sleep 0.5  # nvidia-smi's lines come at once; the first seen, the rest follow within this
  pod_said "$log"
}

# pod_config NAME POD COMMAND ENVS CDI: $d/NAME-pod.json, a host-network sandbox named POD, its
# log in $d/logs/NAME; $d/NAME-container.json, its one container of the probe image running
# COMMAND (JSON), with ENVS and CDI (CRI's fields, JSON).
pod_config() {
  mkdir -p "$d/logs/$1"
  cat >"$d/$1-pod.json" <<EOF
{"metadata": {"name": "$2", "namespace": "gpuop-proof", "uid": "$2-$RANDOM", "attempt": 0},
 "log_directory": "$d/logs/$1",
 "linux": {"cgroup_parent": "/$CGROUP", "security_context": {"namespace_options": {"network": 2, "pid": 1}}}}
EOF
  cat >"$d/$1-container.json" <<EOF
{"metadata": {"name": "gpu"}, "image": {"image": "$PROBE_IMAGE"}, "command": $3,
 "envs": $4, "CDI_devices": $5, "log_path": "ctr.log",
 "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1}}}}
EOF
}

# started NAME HANDLER: Pod NAME's sandbox (of HANDLER) run, its container created and started
# from $d/NAME-pod.json and $d/NAME-container.json; their ids in $d/NAME.ids; false with the
# runtime's refusal in $why.
started() {
  local pod ctr
  if ! pod=$(cri runp ${2:+--runtime "$2"} "$d/$1-pod.json" 2>"$d/$1.err"); then
    why=$(tail -n 1 "$d/$1.err")
    return 1
  fi
  if ! ctr=$(cri create "$pod" "$d/$1-container.json" "$d/$1-pod.json" 2>"$d/$1.err") ||
      ! cri start "$ctr" >/dev/null 2>"$d/$1.err"; then
    why=$(tail -n 1 "$d/$1.err")
    return 1
  fi
  echo "$pod $ctr" >"$d/$1.ids"
}

# gpu_said TEXT: "gpu LINE" where nvidia-smi's TEXT names a GPU, else "none FIRST LINE".
gpu_said() {
  local named
  named=$(printf "%s\n" "$1" | grep -E "^GPU [0-9]+: " | head -n 1) || true  # none named: grep fails
  if [ -n "$named" ]; then echo "gpu $named"; else echo "none $(printf "%s\n" "$1" | head -n 1)"; fi
}

# pod_said LOG: what nvidia-smi said in a container's CRI log (gpu_said).
pod_said() { gpu_said "$(sed -E 's/^[^ ]+ [^ ]+ [^ ]+ //' "$1" 2>/dev/null)"; }

# exec_said NAME: nvidia-smi -L asked again in Pod NAME's running container (CRI's ExecSync).
exec_said() {
  local ctr out
  ctr=$(cut -d" " -f2 "$d/$1.ids")
  [[ $(cri inspect -o go-template --template '{{.status.state}}' "$ctr" 2>&1) == CONTAINER_RUNNING ]] ||
    { echo "none its container no longer runs"; return 0; }
  out=$(cri exec --sync --timeout 20 "$ctr" nvidia-smi -L 2>&1 || true)
  gpu_said "$out"
}

# run_probe: gpuop's repair probe (the kit's probe.json: the handler of its RuntimeClass and its
# command, as drain.probe_manifest writes them), granted one GPU as the device plugin grants it
# (NVIDIA_VISIBLE_DEVICES). Prints "gpu DEVICES" where it ran to exit 0 with the GPU's device
# nodes in its container (the spec the toolkit's runtime handed runc: toolkit_config's witness),
# "none ..." where without, "refused ..." where it did not run.
run_probe() {
  local handler command ctr state=x
  handler=$(sed -n 's/.*"handler": "\([^"]*\)".*/\1/p' "$KIT/probe.json")
  command=$(sed -n 's/.*"command": \(\[[^]]*\]\).*/\1/p' "$KIT/probe.json")
  pod_config probe gpuop-probe "$command" '[{"key": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]' "[]"
  started probe "$handler" || { echo "refused $why"; return 0; }
  ctr=$(cut -d" " -f2 "$d/probe.ids")
  probe_exited() { state=$(cri inspect -o go-template --template '{{.status.state}} {{.status.exitCode}}' "$ctr"); [[ $state == CONTAINER_EXITED* ]]; }
  wait_until 30 "the probe to exit" probe_exited || { echo "none it did not exit: $state"; return 0; }
  local devices
  devices=$(grep -oE '"path": ?"/dev/nvidia[^"]*"' "$W/specs/$ctr.json" 2>/dev/null |
    sed -E 's/"path": ?"(.*)"/\1/' | sort -u | tr "\n" " ")
  if [ "${state#CONTAINER_EXITED }" = 0 ] && [ -n "$devices" ]; then echo "gpu exit 0, devices ${devices% }"
  else echo "none exit ${state#CONTAINER_EXITED }, no GPU device in its spec"; fi
}

remove_pods() { cri rmp -fa >/dev/null 2>&1 || true; }

# restart STAGE START...: the daemon stopped and started again (START: start_containerd VERSION,
# or start_crio); STAGE observes whether it came back.
restart() {
  stop_daemon
  if "${@:2}"; then observe "$1" "restart back"
  else observe "$1" "restart not-back $why"; fi
}

# toolkit_then_restart RUNTIME CONFIG DROPIN STAGE RESTARTED START...: the toolkit's CLI writes
# its drop-in for RUNTIME while the daemon runs; a GPU Pod of the nvidia handler and the node
# read (STAGE); the daemon restarted (START...), the same Pod and read again (RESTARTED).
toolkit_then_restart() {
  timeout -k 2 60 "$KIT/bin/nvidia-ctk" runtime configure --runtime="$1" --config="$2" --drop-in-config="$3" \
    --nvidia-runtime-path="$KIT/bin/nvidia-container-runtime" --config-source=file >>"$d/nvidia-ctk.log" 2>&1
  observe "$4" "pod gpu-pod $(run_pod gpu-pod nvidia env)"
  read_node "$4"
  remove_pods
  restart "$5" "${@:6}"
  observe "$5" "pod gpu-pod $(run_pod gpu-pod nvidia env)"
  read_node "$5"
  remove_pods
}

# Stage 0: the driver, as the node read reads it (its driver section: the modules' versions, the
# libraries', the next boot's kernel and its module), held against nvidia-smi's own answer: the
# same version loaded, and no driver gap on a working machine. No nvidia-smi answering (the
# stand-in's machine has no driver): "none", which the read must say too.
scene_driver() {
  local v="no nvidia-smi"
  ! command -v nvidia-smi >/dev/null ||
    v=$(timeout -k 2 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -n 1)
  if [[ $v =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then observe 0-driver "driver $v"
  else observe 0-driver "driver none ${v:-no nvidia-smi}"; fi
  read_node 0-driver
}

# Stages 1, 2 and 7: the seed's incident on containerd 2.4.2. The toolkit's CLI writes its
# drop-in after the daemon started: the nvidia sandbox is refused; after a restart the same Pod
# gets its GPU; then the repair's own probe runs through the repaired runtime.
scene_incident() {
  containerd_up 2.4.2
  toolkit_then_restart containerd "$d/etc/config.toml" "$d/etc/conf.d/99-nvidia.toml" 1-incident 2-restarted \
    start_containerd 2.4.2
  observe 7-probe "pod gpuop-probe $(run_probe)"
  read_node 7-probe
  remove_pods
}

# Stage 3: containerd 2.4.2 with no GPU handler: a Pod asking by CDI gets the GPU, one asking
# nothing does not (the GPU Operator's CDI mode).
scene_cdi() {
  containerd_up 2.4.2
  observe 3-cdi "pod cdi-pod $(run_pod cdi-pod "" cdi)"
  observe 3-cdi "pod plain-pod $(run_pod plain-pod "" none)"
  read_node 3-cdi
  remove_pods
}

# Stage 4: containerd 1.7.35, CDI off (its default): the same Pod starts, without the GPU.
scene_cdi_off() {
  containerd_up 1.7.35
  observe 4-cdi-off "pod cdi-pod $(run_pod cdi-pod "" cdi)"
  read_node 4-cdi-off
  remove_pods
}

# Stage 5: the AKS incident: containerd 2.3.3 runs a GPU Pod of the nvidia handler, then its
# drop-in is rewritten in config version 4: the running daemon keeps its Pod and its GPU; its
# restart does not come back.
scene_version_4() {
  nvidia_dropin 3
  containerd_up 2.3.3
  local first
  first=$(run_pod gpu-pod nvidia env)
  [[ $first == gpu* ]] || say "5-version-4: the GPU Pod did not get its GPU before the drop-in: $first"
  nvidia_dropin 4
  read_node 5-version-4
  observe 5-version-4 "pod gpu-pod $(exec_said gpu-pod)"
  remove_pods
  restart 5-version-4 start_containerd 2.3.3
}

# crio_config: a CRI-O node's crio.conf, as a distribution leaves it, every path of its own
# under $d: its store on vfs (any /tmp holds it), the kit's runc, conmon and pinns, cgroupfs, the
# GPU's CDI spec where it reads, and the toolkit runtime's config passed on to the runtimes
# through conmon's environment (nvidia-ctk copies it to the handler it writes).
crio_config() {
  mkdir -p "$d/crio.conf.d" "$d/hooks"
  echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$d/policy.json"
  cat >"$d/crio.conf" <<EOF
[crio]
root = "$d/storage"
runroot = "$d/runroot"
storage_driver = "vfs"
log_dir = "$d/logs"
version_file = "$d/version"
version_file_persist = "$d/version-persist"
clean_shutdown_file = "$d/clean.shutdown"

[crio.api]
listen = "$d/crio.sock"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
pinns_path = "$KIT/bin/pinns"
namespaces_dir = "$d/ns"
container_exits_dir = "$d/exits"
container_attach_socket_dir = "$d/attach"
cdi_spec_dirs = ["$W/cdi"]
hooks_dir = ["$d/hooks"]

[crio.runtime.runtimes.runc]
runtime_path = "$KIT/bin/runc"
runtime_type = "oci"
runtime_root = "$d/runc"
monitor_path = "$KIT/bin/conmon"
monitor_env = ["PATH=$KIT/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH=$W/toolkit/config.toml"]

[crio.image]
signature_policy = "$d/policy.json"

[crio.network]
network_dir = "$d/cni"
plugin_dirs = ["$d/cni-bin"]

[crio.nri]
enable_nri = false
EOF
}

start_crio() {
  sock=$d/crio.sock
  PATH=$KIT/bin:$PATH start_daemon crio "$KIT/bin/crio" --config "$d/crio.conf" --config-dir "$d/crio.conf.d"
}

# The kit's images into CRI-O's store, before it starts (nothing can be pulled): every image of
# the archive (its index names them; each pause has a tag of its own), as ctr imports them all.
crio_images() {
  local store="containers-storage:[vfs@$d/storage+$d/runroot]" ref
  for ref in $(timeout -k 2 60 tar -xOf "$KIT/images.tar" index.json | grep -o '"io.containerd.image.name":"[^"]*"' | cut -d'"' -f4); do
    timeout -k 2 60 "$KIT/bin/crio-import" "oci-archive:$KIT/images.tar:${ref##*:}" "$store$ref" >>"$d/import.log" 2>&1
  done
}

# Stage 6: CRI-O with the toolkit's drop-in written after it started: the nvidia sandbox is
# refused; after a restart, the same Pod gets its GPU.
scene_crio() {
  crio_config
  crio_images
  start_crio || die "CRI-O did not start: $why"
  toolkit_then_restart crio "$d/crio.conf" "$d/crio.conf.d/99-nvidia.toml" 6-crio 6-crio-restarted start_crio
}

# A scene's namespace: /run a tmpfs, and /etc, /var/lib and /var/log overlays whose writes land
# in a tmpfs of the namespace's own (what a runtime writes at a default path of its own, CRI-O's
# /etc/crio/policies, its image library's /var/lib/containers/cache, never reaches the host; a
# tmpfs holds an overlay's writes on any /tmp), all gone with it.
scene() {
  local dir
  d=$W/$1
  mkdir -p "$d/host"
  mount -t tmpfs -o mode=755 tmpfs /run
  mount -t tmpfs -o mode=755 tmpfs "$d/host"
  for dir in /etc /var/lib /var/log; do
    mkdir -p "$d/host$dir/upper" "$d/host$dir/work"
    mount -t overlay overlay -o "lowerdir=$dir,upperdir=$d/host$dir/upper,workdir=$d/host$dir/work" "$dir" ||
      die "$dir could not be kept from the host (an overlay of it)"
  done
  hostname "$NODE"
  trap 'stop_daemon' EXIT
  "scene_${1//-/_}"
}

# --- outside: the kit, the GPU's CDI spec, the toolkit's config, the scenes, the cleanup -----

# The CDI spec of the GPU: the driver's own (nvidia-ctk cdi generate), or the stand-in's.
gpu_spec() {
  if [ "$MODE" = stand-in ]; then
    cat >"$W/cdi/nvidia.yaml" <<EOF
cdiVersion: "0.5.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}]
containerEdits:
  mounts: [{hostPath: "$KIT/standin/nvidia-smi", containerPath: /usr/bin/nvidia-smi, options: [ro, nosuid, nodev, bind]}]
EOF
  else
    timeout -k 5 120 "$KIT/bin/nvidia-ctk" cdi generate --output="$W/cdi/nvidia.yaml" \
      --nvidia-cdi-hook-path="$KIT/bin/nvidia-cdi-hook" >"$OUT/cdi-generate.log" 2>&1 ||
      die "nvidia-ctk cdi generate failed (is the NVIDIA driver here? --stand-in where none is): $(tail -n 2 "$OUT/cdi-generate.log")"
  fi
}

# The toolkit runtime's config: CDI mode, its specs, and as its runc a witness that keeps the
# spec it hands the kit's runc (a container's bundle goes with it; the probe's spec shows its GPU).
toolkit_config() {
  mkdir -p "$W/specs"
  cat >"$W/toolkit/runc" <<EOF
#!/bin/sh
b= prev=
for a in "\$@"; do [ "\$prev" = --bundle ] && b=\$a; prev=\$a; done
[ -z "\$b" ] || cp "\$b/config.json" "$W/specs/\${b##*/}.json" 2>/dev/null
exec "$KIT/bin/runc" "\$@"
EOF
  chmod 755 "$W/toolkit/runc"
  cat >"$W/toolkit/config.toml" <<EOF
[nvidia-container-runtime]
mode = "cdi"
runtimes = ["$W/toolkit/runc"]
debug = "$W/toolkit/nvidia-container-runtime.log"
log-level = "info"

[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
spec-dirs = ["$W/cdi"]
annotation-prefixes = ["cdi.k8s.io/"]

[nvidia-ctk]
path = "$KIT/bin/nvidia-ctk"
EOF
}

# The containers' cgroups, deepest first (runc leaves them where a scene was killed).
remove_cgroups() {
  find /sys/fs/cgroup -depth -type d -path "*/$CGROUP*" -exec rmdir {} + 2>/dev/null || true
}

main() {
  [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: sudo $0 KIT OUT [--stand-in]"
  [ "$(id -u)" = 0 ] || die "needs root (it starts containerd and runc)"
  MODE=real
  [ "${3:-}" != --stand-in ] || MODE=stand-in
  [ $# -eq 2 ] || [ "$MODE" = stand-in ] || die "unknown option ${3}: only --stand-in"
  exec 9>/tmp/gpuop-gpu-proof.lock
  flock -n 9 || die "another proof runs (/tmp/gpuop-gpu-proof.lock)"
  rm -rf "$W"
  trap 'remove_cgroups; rm -rf "$W"' EXIT  # whatever ends the run
  if [ -n "$(ls -A "$2" 2>/dev/null)" ]; then  # a rerun replaces an earlier proof's files, and only those
    [ -f "$2/run" ] || die "$2 holds files of something else than an earlier proof: give an empty or a new folder"
    rm -rf "${2:?}"/*
  fi
  mkdir -p "$W/cdi" "$W/toolkit" "$2"
  OUT=$(realpath "$2")
  if [ -d "$1" ]; then KIT=$(realpath "$1")
  else
    say "unpacking $1"
    mkdir -p "$W/kit"
    timeout -k 5 300 tar -xJf "$1" -C "$W/kit" --strip-components=1 || die "$1 is not a kit (lab/build.sh gpu-kit)"
    KIT=$W/kit
  fi
  [ -x "$KIT/bin/crictl" ] && [ -f "$KIT/node-read.sh" ] || die "$KIT is not a kit: no bin/crictl or node-read.sh"
  export KIT OUT MODE W
  gpu_spec
  toolkit_config
  { echo "mode $MODE"; cat "$KIT/VERSIONS"; [ "$MODE" = stand-in ] || timeout -k 2 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu /'; } >"$OUT/run"
  local scene start failed=0
  for scene in driver incident cdi cdi-off version-4 crio; do
    start=$SECONDS
    say "scene $scene ..."
    if ! timeout -k 5 "$SCENE_S" unshare -m -p -u -f --mount-proc --propagation private --kill-child \
        bash "$(realpath "$0")" scene "$scene" >"$OUT/scene-$scene.log" 2>&1; then
      say "scene $scene FAILED after $((SECONDS - start))s: $(tail -n 3 "$OUT/scene-$scene.log")"
      failed=1
    fi
    echo "$scene $((SECONDS - start))" >>"$OUT/seconds"
    for f in "$W/$scene"/*.log; do [ -f "$f" ] && cp "$f" "$OUT/$scene-${f##*/}"; done
  done
  cp "$W/toolkit/nvidia-container-runtime.log" "$OUT/" 2>/dev/null || true
  # The judgment, where the project is beside this script (its venv); else where it is installed.
  local judge python
  judge=$(dirname "$(realpath "$0")")/judge.py python=${PYTHON:-$(dirname "$(realpath "$0")")/../../.venv/bin/python}
  if [ -f "$judge" ] && [ -x "$python" ]; then
    timeout -k 5 300 "$python" "$judge" "$OUT" || failed=1
  else
    say "the reads are in $OUT: judge them where gpuop is installed: .venv/bin/python bench/gpu/judge.py $OUT"
  fi
  return $failed
}

case ${1:-} in
scene) scene "$2" ;;
*) main "$@" ;;
esac
