# The node audit's one read of a real node (runbook/reach/node.py, NodeRuntime, and the node agent
# send this file whole as one command, then `read_node`): what runs (every containerd and CRI-O,
# kubelet, k3s), which runtime serves kubelet, and for that one its files, its own merge of them,
# and its CRI answer; and the NVIDIA driver (driver_read); in sections "--- gpuop KIND ...", each
# under a deadline of its own (`section`): one that does not end is named "--- gpuop unread KIND
# ...", the rest still read. Read-only: it writes no file and leaves no socket.
#
# Set before this text by the controller, all of it also in GPUOP_READ (what a section's own shell
# defines first): CRICTL (crictl on the node), NVIDIA_BINARIES (where k3s looks for NVIDIA runtimes
# at start), FILE_KIB (the most of a file the read carries, in KiB) and the shell it shares with the
# lab's facts:
#   gpuop_tar FILE...         the files, tarred, gzipped and base64'd on one line
#   gpuop_restart BINARY CFG  the binary's version and its own merge of CFG (its next start's)
#   gpuop_cri CRICTL ADDRESS  `crictl info` on the socket, then crictl's exit status

DEFAULT_CONFIG=/etc/containerd/config.toml
DEFAULT_SOCKET=/run/containerd/containerd.sock
K3S_SOCKET=/run/k3s/containerd/containerd.sock
CRIO_CONFIG=/etc/crio/crio.conf
CRIO_CONFIG_DIR=/etc/crio/crio.conf.d
CRIO_SOCKET=/var/run/crio/crio.sock
# Where CRI-O looks for OCI hooks when its config names none (its default hooks_dir, and the
# directory the GPU Operator's hook goes to on CRI-O without CDI).
CRIO_HOOKS_DIRS="/usr/share/containers/oci/hooks.d /etc/containers/oci/hooks.d"
# The NVIDIA kernel modules, as sysfs names them (Debian packages them as nvidia-current), and
# where the driver's libraries are (Debian and Ubuntu, RHEL-likes and AL2023, and the aarch64 twins).
NVIDIA_MODULES="nvidia nvidia_uvm nvidia_modeset nvidia_drm nvidia_peermem nvidia_current nvidia_current_uvm
  nvidia_current_modeset nvidia_current_drm nvidia_current_peermem"
NVIDIA_LIB_DIRS="/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu /usr/lib"

# The command line of process $1, one argument a line.
args() { tr "\0" "\n" <"/proc/$1/cmdline"; }

# The value of flag $1 (--name=value or --name value) in a command line on stdin.
flag() { sed -n "/^$1=/{s/^[^=]*=//p;q};/^$1\$/{n;p;q}"; }

# kind_of PID KIND: sets kind, and kubelet's default endpoint (ke0) and drop-in folder (kd0).
# k3s is one multicall binary: its containerd's /proc/PID/exe is the k3s file, told apart by
# argv[0]'s base name, and its kubelet runs inside the k3s process, whose default endpoint is its
# own containerd's socket. Any other process of that binary (ctr, crictl, kubectl): status 1.
kind_of() {
  kind=$2 ke0=unix://$DEFAULT_SOCKET kd0=
  [ "$kind" = k3s ] || return 0
  a0=$(args "$1" | head -n 1)
  case "${a0##*/}" in
  containerd) kind=containerd ;;
  k3s|k3s-server|k3s-agent)
    kind=kubelet
    dd=$(args "$1" | flag --data-dir)
    kd0=${dd:-/var/lib/rancher/k3s}/agent/etc/kubelet.conf.d ke0=unix://$K3S_SOCKET ;;
  *) return 1 ;;
  esac
}

# runs_subcommand NAME: whether the command line on stdin (one argument a line) runs one of
# runtime NAME's subcommands (`containerd config dump`, `crio config`: what the node read itself,
# another reader, or the GPU Operator's installer runs for a moment) rather than the daemon: a
# bare word that is a subcommand of NAME, not the value of the flag before it.
runs_subcommand() {
  case $1 in
  containerd) subs=" config publish oci-hook help h " ;;
  *) subs=" config status version wipe check completion man markdown help h " ;;
  esac
  awk -v subs="$subs" 'NR > 1 && $0 !~ /^-/ && index(subs, " " $0 " ") && !(prev ~ /^-/ && prev !~ /=/) {found = 1; exit}
    {prev = $0} END {exit !found}'
}

# kubelet_endpoint PID: sets ke, the socket kubelet talks to: --container-runtime-endpoint, else
# the last containerRuntimeEndpoint of its --config file and then its --config-dir drop-ins
# (*.conf, in name order, as kubelet merges them), YAML or JSON (EKS: config.json; RKE2:
# kubelet.conf.d only), else its default (since 1.27). Paths are relative to its cwd.
kubelet_endpoint() {
  c=$(args "$1") w=$(readlink "/proc/$1/cwd")
  ke=$(echo "$c" | flag --container-runtime-endpoint)
  if [ -z "$ke" ]; then
    k=$(echo "$c" | flag --config) kd=$(echo "$c" | flag --config-dir)
    case "$k" in ""|/*) ;; *) k="$w/$k" ;; esac
    case "$kd" in ""|/*) ;; *) kd="$w/$kd" ;; esac
    kd=${kd:-$kd0}
    for f in $k ${kd:+"$kd"/*.conf}; do
      [ -f "$f" ] || continue
      v=$(sed -n -e 's/.*"containerRuntimeEndpoint"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' \
        -e 's/^[[:space:]]*containerRuntimeEndpoint[[:space:]]*:[[:space:]]*//p' "$f" 2>/dev/null |
        head -n 1 | tr -d "\"' ")
      [ -z "$v" ] || ke=$v
    done
  fi
  ke=${ke:-$ke0} ke=${ke#unix://}
}

# daemon_flags PID: sets cfg and addr, a containerd's --config (default /etc/containerd/config.toml,
# relative to its cwd) and socket: --address, else the config's grpc.address, else the default.
daemon_flags() {
  o=$(args "$1" | {
    c=$DEFAULT_CONFIG a= n=
    while IFS= read -r x; do
      case "$n" in c) c=$x ;; a) a=$x ;; esac
      n=
      case "$x" in
      -c|--config) n=c ;;
      -a|--address) n=a ;;
      -c=*|--config=*) c=${x#*=} ;;
      -a=*|--address=*) a=${x#*=} ;;
      esac
    done
    printf "%s\n%s\n" "$c" "$a"
  })
  cfg=$(echo "$o" | sed -n 1p) addr=$(echo "$o" | sed -n 2p)
  case "$cfg" in /*) ;; *) cfg="$(readlink "/proc/$1/cwd")/$cfg" ;; esac
  [ -n "$addr" ] || addr=$(awk -F'"' '/^[[:space:]]*\[/ {t=$0; gsub(/[[:space:]]/, "", t)}
    t == "[grpc]" && $1 ~ /^[[:space:]]*address[[:space:]]*=/ {print $2; exit}' "$cfg" 2>/dev/null)
  [ -n "$addr" ] || addr=$DEFAULT_SOCKET
  addr=${addr#unix://}
}

# crio_flags PID: sets cfg, dir and addr, a CRI-O's --config (-c), --config-dir (-d) and
# --listen, else its defaults; its socket, where no flag gives it, is the last `listen` of its
# files (the config, then its drop-ins in name order: CRI-O's own order), else the default.
crio_flags() {
  c=$(args "$1") w=$(readlink "/proc/$1/cwd")
  cfg=$(echo "$c" | flag --config); [ -n "$cfg" ] || cfg=$(echo "$c" | flag -c)
  dir=$(echo "$c" | flag --config-dir); [ -n "$dir" ] || dir=$(echo "$c" | flag -d)
  addr=$(echo "$c" | flag --listen)
  cfg=${cfg:-$CRIO_CONFIG} dir=${dir:-$CRIO_CONFIG_DIR}
  case "$cfg" in /*) ;; *) cfg="$w/$cfg" ;; esac
  case "$dir" in /*) ;; *) dir="$w/$dir" ;; esac
  if [ -z "$addr" ]; then
    for f in "$cfg" "$dir"/*; do
      [ -f "$f" ] || continue
      v=$(sed -n 's/^[[:space:]]*listen[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | tail -n 1)
      [ -z "$v" ] || addr=$v
    done
  fi
  addr=${addr:-$CRIO_SOCKET} addr=${addr#unix://}
}

# same_socket A B: whether two socket paths are one (/var/run is /run on every distribution).
same_socket() { [ "${1#/var}" = "${2#/var}" ]; }

# restart_binary EXE: sets b, the binary asked for the restart view: the daemon's own when it is
# named containerd, else the `containerd` beside it (k3s's link to itself), else none.
restart_binary() {
  case "${1##*/}" in
  containerd) b=$1 ;;
  *) b=${1%/*}/containerd; [ -x "$b" ] || b= ;;
  esac
}

# bounded_tar FILE...: the files of at most FILE_KIB KiB on one line (gpuop_tar; an empty line where
# none), then each larger one as "large BYTES PATH": a node's file of any size is named, never
# carried whole (a log left in conf.d would otherwise fill the reader's memory).
bounded_tar() {
  [ $# -gt 0 ] || { echo; return 0; }
  big=$(find -L "$@" -maxdepth 0 -type f -size +"${FILE_KIB}k" 2>/dev/null | awk '!seen[$0]++')
  n=$#
  for f in "$@"; do
    case "
$big
" in *"
$f
"*) ;; *) set -- "$@" "$f" ;; esac
  done
  shift "$n"
  gpuop_tar "$@" | grep . || echo
  [ -z "$big" ] || printf "%s\n" "$big" | while IFS= read -r f; do echo "large $(stat -Lc %s "$f") $f"; done
}

# written CFG: the config, the files its top-level `imports` reach, every file of the conf.d
# beside it (one no import reaches is a finding) and the k3s/RKE2 templates, on one line
# (bounded_tar); then each of those paths that is there and no regular file (a FIFO, a socket, a
# link to nothing or to itself: never opened, its read would block or fail) as "odd PATH". The
# controller parses `imports` again with a TOML parser.
written() {
  set -- "$1"
  d=${1%/*} odd=
  for g in $(awk '/^[[:space:]]*\[/ {exit} /^[[:space:]]*imports[[:space:]]*=/ {on=1} on {print}
      on && /\]/ {exit}' "$1" 2>/dev/null | grep -o "\"[^\"]*\"\|'[^']*'" | tr -d "\"'"); do
    case "$g" in /*) ;; *) g="$d/$g" ;; esac
    for f in $g; do
      if [ -f "$f" ]; then set -- "$@" "$f"; elif [ -L "$f" ] || [ -p "$f" ] || [ -S "$f" ]; then odd="$odd$f
"; fi
    done
  done
  for f in "$d"/conf.d/* "$d"/config.toml.tmpl "$d"/config-v3.toml.tmpl; do
    if [ -f "$f" ]; then set -- "$@" "$f"; elif [ -L "$f" ] || [ -p "$f" ] || [ -S "$f" ]; then odd="$odd$f
"; fi
  done
  bounded_tar "$@"
  [ -z "$odd" ] || printf "%s" "$odd" | sort -u | sed -n "s|^/|odd /|p"
}

# listed KEY CRI_ANSWER: the strings of the answer's JSON array KEY, a word each.
listed() {
  printf "%s" "$2" | tr -d "\n" | sed -n "s/.*\"$1\": *\[\([^]]*\)\].*/\1/p" | tr -d "\" " | tr , " "
}

# cdi_specs CRI_ANSWER: the CDI specs of GPUs (files naming the kind nvidia.com/gpu) in the spec
# directories the daemon reads (its answer's cdiSpecDirs; CRI-O's CDISpecDirs).
cdi_specs() {
  for d in $(listed cdiSpecDirs "$1") $(listed CDISpecDirs "$1"); do
    grep -l -s -E "nvidia\.com/gpu" "$d"/*.yaml "$d"/*.yml "$d"/*.json
  done
}

# crio_hooks CRI_ANSWER: the OCI hook files in the directories CRI-O reads (its answer's
# HooksDir, else its defaults) that name an NVIDIA hook, on one line (bounded_tar).
crio_hooks() {
  h=$(listed HooksDir "$1")
  set --
  for d in ${h:-$CRIO_HOOKS_DIRS}; do
    for f in $(grep -l -s -E "nvidia-container-(runtime-hook|toolkit)" "$d"/*.json); do set -- "$@" "$f"; done
  done
  [ $# -eq 0 ] || bounded_tar "$@"
}

# crio_restart BINARY CFG DIR PID: the binary's version, then its own merge of the files (`crio
# config`: what its next start, or a SIGHUP, reads; its refusal after a line "--- merge failed"),
# then each runtime of the merge, "NAME|PATH|yes" where its binary is there (PATH, or NAME on the
# daemon's own PATH where the merge gives none), else "NAME|PATH|no" (gpuop.judgment.crio).
crio_restart() {
  [ -x "$1" ] || return 0
  on_path=$(tr "\0" "\n" <"/proc/$4/environ" 2>/dev/null | sed -n "s/^PATH=//p")
  gpuop_ask 10 "$1" version 2>/dev/null | sed -n "s/^Version:[[:space:]]*/Version: /p" | head -n 1
  m=$(gpuop_ask 30 "$1" --config "$2" --config-dir "$3" config 2>/dev/null) || {
    echo "--- merge failed"
    gpuop_ask 30 "$1" --config "$2" --config-dir "$3" config 2>&1 >/dev/null | tail -n 3
  }
  printf "%s\n" "$m"
  echo "--- runtime paths"
  printf "%s\n" "$m" | awk '/^[[:space:]]*\[/ {n = ""} /^[[:space:]]*\[crio\.runtime\.runtimes\./ {
      n = $0; sub(/^[^.]*\.runtime\.runtimes\./, "", n); sub(/\].*/, "", n); gsub(/"/, "", n)}
    n != "" && /^[[:space:]]*runtime_path[[:space:]]*=/ {p = $0; sub(/^[^"]*"/, "", p); sub(/".*/, "", p); print n "|" p}' |
    while IFS="|" read -r n p; do
      if [ -n "$p" ]; then [ -x "$p" ] && t=yes || t=no
      else PATH=${on_path:-$PATH} command -v "$n" >/dev/null && t=yes || t=no; fi
      echo "$n|$p|$t"
    done
}

# When process $1 started, in whole seconds since the epoch: the boot's time (/proc/stat's btime,
# fixed, so two reads agree) plus its start in clock ticks after boot (/proc/PID/stat's 22nd field;
# its 2nd, the name, may hold spaces).
started() {
  awk -v hz="$(getconf CLK_TCK 2>/dev/null || echo 100)" '
    FNR == NR { if ($1 == "btime") boot = $2; next }
    { sub(/^.*\) /, ""); printf "%d\n", boot + int($20 / hz) }' /proc/stat "/proc/$1/stat"
}

# section NAME SECONDS FUNCTION [ARG...]: the section "--- gpuop NAME", what FUNCTION prints, in a
# shell of its own (GPUOP_READ: the whole read) under a deadline of its own, cut to what is left of
# the whole read's (GPUOP_END, seconds since the epoch, where read_node set it): the sections fit
# inside it. One that does not end in time (a file read that blocks: a FIFO, a hung mount) is
# ended with all it started (timeout signals its process group) and named "--- gpuop unread NAME
# SECONDS", as is one with no time left ("0s"): the rest is still read.
section() {
  s=$1 t=$2; shift 2
  echo "--- gpuop $s"
  if [ -n "${GPUOP_END:-}" ]; then
    l=$((GPUOP_END - $(date +%s)))
    [ "$l" -ge "$t" ] || t=$((l > 0 ? l : 0))
    [ "$t" -gt 0 ] || { echo "--- gpuop unread $s 0s"; return 0; }
  fi
  timeout -k 2 "$t" sh -c "$GPUOP_READ"'
"$@"' sh "$@" </dev/null
  r=$?
  [ "$r" -ne 124 ] && [ "$r" -ne 137 ] || echo "--- gpuop unread $s ${t}s"
}

# processes: every containerd, kubelet, k3s and CRI-O process of the node's own PID namespace as
# KIND:PID, one a line: a container's process of that name (a k3s in a Pod, a kubelet under test)
# runs in a PID namespace of its own and is not the node's. `ls -l` names every process's binary in
# one process (a readlink each costs a fork per process on a busy node); shims and ctr are other
# binaries and do not match; only those few are asked their namespace.
processes() {
  own=$(readlink /proc/self/ns/pid)
  ls -l /proc/[0-9]*/exe 2>/dev/null |
    sed -nE 's@.* /proc/([0-9]+)/exe -> (.*/)?(containerd|kubelet|k3s|crio)( \(deleted\))?$@\3:\1@p' |
    while IFS= read -r x; do [ "$(readlink "/proc/${x#*:}/ns/pid" 2>/dev/null)" != "$own" ] || echo "$x"; done
}

# described KIND PID: a process's section: its binary, command line (base64), then where it
# talks: kubelet its endpoint; containerd its config, socket and restart binary; CRI-O its config,
# drop-in folder and socket.
described() {
  kind_of "$2" "$1"
  e=$(readlink "/proc/$2/exe") e=${e% (deleted)}
  echo "$e"
  base64 -w0 <"/proc/$2/cmdline"; echo
  case $kind in
  kubelet) kubelet_endpoint "$2"; echo "$ke" ;;
  crio) crio_flags "$2"; printf "%s\n%s\n%s\n" "$cfg" "$dir" "$addr" ;;
  *) daemon_flags "$2"; restart_binary "$e"; printf "%s\n%s\n%s\n" "$cfg" "$addr" "$b" ;;
  esac
}

# runtime_files CFG [DIR]: the runtime's files on one line, an empty one where none: a
# containerd's (written), or a CRI-O's config and every file of its drop-in folder DIR.
runtime_files() {
  if [ $# -eq 1 ]; then written "$1"; return 0; fi
  c=$1 d=$2
  set --
  for f in "$c" "$d"/*; do [ -f "$f" ] && set -- "$@" "$f"; done
  bounded_tar "$@"
}

# crio_status BINARY SOCKET: CRI-O's own status API (where the node has no crictl), its status.
crio_status() { gpuop_ask 10 "$1" status --socket "$2" config 2>/dev/null; echo "$?"; }

# nvidia_found: the NVIDIA runtime binaries where k3s looks for them at its start.
nvidia_found() { for f in $NVIDIA_BINARIES; do [ -f "$f" ] && echo "$f"; done; return 0; }

# kmod_version FILE KVER: "kmod KVER FILE VERSION SIZE MTIME" for the main NVIDIA module FILE of
# kernel KVER: its version as modinfo reads it, which decompresses the whole module (a second or
# more of CPU for an xz one of ~100 MB), or as KNOWN_KMODS says it for that very file (its size
# and time unchanged: the agent's earlier read's answer, "FILE SIZE MTIME VERSION" a line).
kmod_version() {
  st=$(stat -L -c "%s %Y" "$1" 2>/dev/null) || return 0
  kv=
  [ -z "${KNOWN_KMODS:-}" ] || kv=$(printf "%s\n" "$KNOWN_KMODS" | awk -v f="$1" -v st="$st" '$1 == f && $2 " " $3 == st {print $4; exit}')
  [ -n "$kv" ] || kv=$(modinfo -F version "$1" 2>/dev/null | head -n 1)
  echo "kmod $2 $1 ${kv:--} $st"
}

# driver_read: the NVIDIA driver's three views (gpuop.judgment.driver), a fact a line: loaded (the
# GPUs on the PCI bus, the modules' versions in sysfs, the kernel's own line, the device nodes),
# written (the libraries' versions from their names, the host's and the GPU Operator's driver root,
# its validator's word, Fabric Manager's version line) and after the next start (the running and
# installed kernels, the boot loader's default, saved and one-time entries, each installed kernel's
# NVIDIA modules as its modules.dep lists them and their versions as modinfo reads them, DKMS's word
# where it holds NVIDIA's, a reboot pending), then the NVIDIA CDI specs' files that are not there
# and whether a boot makes them again. No GPU and no NVIDIA binary needed but Fabric Manager's.
driver_read() {
  for d in $(grep -l -s -x 0x10de /sys/bus/pci/devices/*/vendor); do  # one grep, not a read per device
    d=${d%/vendor}
    case $(cat "$d/class" 2>/dev/null) in 0x0300*|0x0302*) echo "gpu ${d##*/}" ;; esac
  done
  for m in $NVIDIA_MODULES; do
    [ ! -d "/sys/module/$m" ] || echo "module $m $(cat "/sys/module/$m/version" 2>/dev/null)"
  done
  [ ! -r /proc/driver/nvidia/version ] || echo "procfs $(head -n 1 /proc/driver/nvidia/version)"
  for f in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia[0-9]*; do [ ! -e "$f" ] || echo "dev $f"; done
  for root in "" /run/nvidia/driver; do
    for dir in $NVIDIA_LIB_DIRS; do
      for f in "$root$dir"/libnvidia-ml.so.*.* "$root$dir"/libcuda.so.*.*; do [ ! -e "$f" ] || echo "lib $f"; done
    done
  done
  [ ! -d /run/nvidia/driver ] || echo "operator-root /run/nvidia/driver"
  [ ! -r /run/nvidia/validations/driver-ready ] || sed "s/^/driver-ready /" /run/nvidia/validations/driver-ready
  fm=$(command -v nv-fabricmanager) && echo "fm $(timeout -k 1 5 "$fm" --version 2>&1 | grep -m 1 -i version)"
  running=$(uname -r)
  echo "running $running"
  for f in /boot/vmlinuz-*; do [ ! -e "$f" ] || echo "kernel ${f#/boot/vmlinuz-}"; done
  for f in /etc/default/grub /etc/default/grub.d/*.cfg; do  # the last GRUB_DEFAULT wins
    [ ! -r "$f" ] || sed -n "s/^GRUB_DEFAULT=/grub-default /p" "$f"
  done
  for f in /boot/grub/grubenv /boot/grub2/grubenv; do
    [ ! -r "$f" ] || sed -n "s/^\(saved_entry\|next_entry\)=/grubenv \1 /p" "$f"
  done
  for f in /boot/loader/entries/*.conf /boot/efi/loader/entries/*.conf /efi/loader/entries/*.conf; do
    [ ! -r "$f" ] || sed -n "s|^\(version\|linux\|title\)[[:space:]]\{1,\}|bls ${f##*/} \1 |p" "$f"
  done
  for f in /boot/loader/loader.conf /boot/efi/loader/loader.conf /efi/loader/loader.conf; do
    [ ! -r "$f" ] || sed -n "s/^default[[:space:]]\{1,\}/sdboot-default /p" "$f"
  done
  for k in /lib/modules/*; do
    v=${k##*/}
    [ -e "/boot/vmlinuz-$v" ] || [ "$v" = "$running" ] || continue
    sed -n "s@^\([^:]*/nvidia[-_a-z]*\.ko[.a-z]*\):.*@\1@p" "$k/modules.dep" 2>/dev/null | while IFS= read -r m; do
      case $m in /*) f=$m ;; *) f=$k/$m ;; esac
      case ${m##*/} in
      nvidia.ko*|nvidia-current.ko*) kmod_version "$f" "$v" ;;
      *) echo "kmod $v $f" ;;
      esac
    done
  done
  for d in /var/lib/dkms/nvidia*; do  # DKMS asked only where it holds NVIDIA's module
    [ -d "$d" ] && command -v dkms >/dev/null || continue
    timeout -k 1 10 dkms status 2>/dev/null | sed -n "s/^nvidia/dkms nvidia/p"
    break
  done
  [ ! -e /var/run/reboot-required ] || echo "reboot-required"
  [ ! -r /var/run/reboot-required.pkgs ] || echo "reboot-pkgs $(tr "\n" " " </var/run/reboot-required.pkgs)"
  for f in /etc/cdi/*.yaml /etc/cdi/*.json /var/run/cdi/*.yaml /var/run/cdi/*.json; do
    [ -f "$f" ] && grep -q -s "nvidia.com/gpu" "$f" || continue
    echo "cdi $f"
    v=$(grep -o -s -m 1 -e "--host-driver-version=[0-9.]*" "$f") && echo "cdi-version $f ${v#*=}"
    grep -o -s "hostPath\"\{0,1\}:[[:space:]]*\"\{0,1\}[^\",}[:space:]]*" "$f" | sed "s/.*:[[:space:]]*\"\{0,1\}//" |
      sort -u | while IFS= read -r p; do [ -e "$p" ] || echo "cdi-missing $f $p"; done
  done
  for u in /etc/systemd/system/*.wants/nvidia-cdi-refresh.service /lib/systemd/system/*.wants/nvidia-cdi-refresh.service \
    /usr/lib/systemd/system/*.wants/nvidia-cdi-refresh.service; do
    [ ! -e "$u" ] || { echo "cdi-refresh nvidia-cdi-refresh.service"; break; }
  done
  return 0
}

# The deadlines of the sections: one that only reads files or /proc, one whose commands have
# deadlines of their own (a binary's merge: its version, its merge, its words again; crictl), the
# driver's (files, modinfo, and Fabric Manager's and DKMS's words under deadlines of their own).
FILES_S=10 MERGE_S=100 CRI_S=15 DRIVER_S=20

# The whole read's deadline in seconds (READ_S, set by the controller from the deadline it reads
# under, less a margin for the last section's kill and the way back), from read_node's start.
read_node() {
  GPUOP_END=$(($(date +%s) + ${READ_S:-145}))
  echo "--- gpuop hostname $(cat /proc/sys/kernel/hostname)"
  section driver "$DRIVER_S" driver_read  # whatever runs: a node with no runtime still has its driver
  ke= list=
  found=$(section processes "$FILES_S" processes)
  case $found in *"--- gpuop unread "*) printf "%s\n" "$found"; return 0 ;; esac  # no process is judged unread
  for x in $(printf "%s\n" "$found" | sed 1d); do
    p=${x#*:}
    kind_of "$p" "${x%:*}" || continue
    # a process gone since it was listed (another reader's `containerd config dump` that ended) is none
    c=$(args "$p" 2>/dev/null) && [ -n "$c" ] || continue
    case $kind in containerd|crio) printf "%s\n" "$c" | runs_subcommand "$kind" && continue ;; esac
    d=$(section "$kind $p" "$FILES_S" described "${x%:*}" "$p")
    case $d in *"--- gpuop unread "*) printf "%s\n" "$d"; continue ;; esac  # named unread: not the runtime
    e=$(echo "$d" | sed -n 2p) l4=$(echo "$d" | sed -n 4p) l5=$(echo "$d" | sed -n 5p) l6=$(echo "$d" | sed -n 6p)
    [ -n "$e" ] && [ -n "$(echo "$d" | sed -n 3p)" ] || continue  # gone while it was read
    printf "%s\n" "$d"
    case $kind in
    kubelet) ke=$l4 ;;
    crio) list="$list$p|$l6|$l4|$e|$l5\n" ;;
    *) list="$list$p|$l5|$l4|$l6|\n" ;;
    esac
  done
  # CRI is asked of one daemon, the node's runtime: the one on kubelet's endpoint; with no
  # kubelet, the only one, or the one on the default socket. Asking another is not read-only:
  # a containerd writes its introspection uuid at its first CRI Status.
  n=$(printf "%b" "$list" | grep -c .)
  printf "%b" "$list" | while IFS="|" read -r p addr cfg exe dir; do
    if [ -n "$ke" ]; then
      same_socket "$addr" "$ke" || continue
    elif [ "$n" -gt 1 ]; then
      same_socket "$addr" "$DEFAULT_SOCKET" || continue
    fi
    if [ -n "$dir" ]; then  # CRI-O: its config and every file of its drop-in folder
      section "runtime $p" "$FILES_S" runtime_files "$cfg" "$dir"
      section restart "$MERGE_S" crio_restart "$exe" "$cfg" "$dir" "$p"
    else
      section "runtime $p" "$FILES_S" runtime_files "$cfg"
      section restart "$MERGE_S" gpuop_restart "$exe" "$cfg"
    fi
    section started "$FILES_S" started "$p"  # a kubelet's event older than this daemon is not its word
    out=$(section cri "$CRI_S" gpuop_cri "$CRICTL" "$addr")
    printf "%s\n" "$out"
    section cdi "$FILES_S" cdi_specs "$out"
    if [ -n "$dir" ]; then
      if [ "$(printf "%s\n" "$out" | tail -n 1)" = 127 ]; then  # no crictl: CRI-O's own status API
        section status "$CRI_S" crio_status "$exe" "$addr"
      fi
      section hooks "$FILES_S" crio_hooks "$out"
    else
      section nvidia "$FILES_S" nvidia_found  # what k3s and RKE2 would register at their next start (gpuop.judgment.regen)
    fi
    break
  done
}
