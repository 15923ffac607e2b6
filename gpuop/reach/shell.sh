# The shell gpuop sends to a node or a lab host beside its own commands; gpuop/reach/shell.py
# reads what it prints. It reads GPUOP_CRICTL_S, GPUOP_DUMP_S and GPUOP_DUMP_MIGRATING, set
# before it (shell.py's shell_functions).

# gpuop_ask SECONDS BINARY ARGS...: a runtime's binary (Go: containerd, crictl, CRI-O, nvidia-ctk)
# asked one question: ended after SECONDS (killed 2 s later), on one thread of Go's scheduler. One
# question needs no more, and on a 2-core lab host more threads slowed the read's kubectl beside it.
gpuop_ask() { GOMAXPROCS=1 timeout -k 2 "$@"; }

# gpuop_tar FILE...: the files named, as one base64 tar on one line; nothing where there are none.
gpuop_tar() {
  [ $# -eq 0 ] || { tar -czhPf - --no-recursion --ignore-failed-read -- "$@" | base64 -w0; echo; }
}

# gpuop_cri CRICTL SOCKET: what the containerd on SOCKET holds (`crictl info`), then crictl's exit
# status. crictl's own deadline is 3 s; GPUOP_CRICTL_S ends one that still hangs.
gpuop_cri() {
  gpuop_ask "$GPUOP_CRICTL_S" "$1" --config /dev/null --runtime-endpoint "unix://$2" --timeout 3s info 2>&1
  echo "$?"
}

# gpuop_restart BINARY CONFIG: the binary's version, then its own merge of CONFIG as its next start
# reads it: its `config dump`, or `config migrate` on the releases whose dump skips migrations
# (GPUOP_DUMP_MIGRATING); where that fails, "--- dump failed" and its words. Nothing where BINARY
# is not there.
gpuop_restart() {
  [ -x "$1" ] || return 0
  v=$(gpuop_ask "$GPUOP_DUMP_S" "$1" --version)
  echo "$v"
  r=$(echo "$v" | awk '{ print $3 }') r=${r#v} r=${r%%[~+-]*}
  sub=dump
  for m in $GPUOP_DUMP_MIGRATING; do [ "$r" != "$m" ] || sub=migrate; done
  gpuop_ask "$GPUOP_DUMP_S" "$1" --config "$2" config "$sub" 2>/dev/null || {
    rc=$?
    echo "--- dump failed"
    # one that hung is not asked twice; one that failed is asked again for its own words
    if [ "$rc" -ge 124 ]; then
      echo "config $sub did not answer within ${GPUOP_DUMP_S}s"
    else
      gpuop_ask "$GPUOP_DUMP_S" "$1" --config "$2" config "$sub" 2>&1 | tail -n 3
    fi
  }
}

# gpuop_toolkit_dropin RUNTIME CONFIG DROPIN DEADLINE DIR...: the node's own nvidia-ctk (on PATH,
# else in a DIR: where the GPU Operator installs it, off PATH), its version, then the drop-in it
# would write for RUNTIME's CONFIG at DROPIN (`runtime configure --dry-run`, which writes nothing).
# CRI-O's it prints alone (its log on stderr, left out): marked here as nvidia-ctk marks its own.
# Nothing where the node has no nvidia-ctk.
gpuop_toolkit_dropin() {
  rt=$1 cfg=$2 dropin=$3 t=$4
  shift 4
  ctk=$(command -v nvidia-ctk) || for c in "$@"; do [ -x "$c/nvidia-ctk" ] && ctk=$c/nvidia-ctk && break; done
  [ -n "$ctk" ] || return 0
  echo "$ctk"
  gpuop_ask 10 "$ctk" --version 2>&1 | head -n 1
  set -- runtime configure --runtime="$rt" --config="$cfg" --drop-in-config="$dropin" --config-source=file --dry-run
  if [ "$rt" = crio ]; then
    echo "Drop-in config:"
    gpuop_ask "$t" "$ctk" "$@" 2>/dev/null
  else
    gpuop_ask "$t" "$ctk" "$@" 2>&1
  fi
}
