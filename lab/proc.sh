# Finding the lab's processes by what they are, and its containers' cgroups by their ids, waiting
# with an end, and a runtime's own sandbox image (sourced by lab/lab.sh, lab/simnode.sh,
# lab/kubeletnode.sh and lab/gpukit.sh).

# pids_with_arg ARG EXE: processes with the argument ARG on their command line whose binary is EXE.
pids_with_arg() {
  local f p
  for f in $(grep -lzxF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
    p=${f#/proc/}; p=${p%/cmdline}
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == */"$2" ]] && echo "$p"
  done
  return 0
}

# cgroups_named PREFIX DIR...: the cgroups, in every hierarchy, of the containers a runtime keeps
# a directory for in each DIR (named for its id), PREFIX before the id (containerd's Pods:
# k8s.io/; CRI-O's: crio- and crio/crio-), added to $cgroups. The kernel keeps a cgroup after its
# processes, so a node's stop removes them.
cgroups_named() {
  local prefix=$1 d t
  shift
  for d in "$@"; do
    for t in "$d"/*/; do
      [[ -d $t ]] && cgroups+=(/sys/fs/cgroup/*/"$prefix$(basename "$t")")
    done
  done
  return 0
}

# sandbox_image BINARY: the pause image a containerd (its `config default`) or a CRI-O (its
# `config`, with no file) starts every sandbox with, where nothing names another.
sandbox_image() {
  case ${1##*/} in
  crio) timeout -k 2 30 "$1" --config /dev/null config 2>/dev/null | sed -n 's/^#\{0,1\} *pause_image = "\(.*\)"/\1/p' ;;
  *) timeout -k 2 30 "$1" config default 2>/dev/null | sed -n "s/^ *sandbox\(_image\)\{0,1\} = [\"']\([^\"']*\)[\"']/\2/p" ;;
  esac | head -n 1
}

# wait_until SECONDS INTERVAL WHAT COMMAND...: run COMMAND every INTERVAL seconds until it
# succeeds, saying every 10 s that it still waits for WHAT; after SECONDS, say that WHAT did not
# happen and fail. The one wait loop of the lab's scripts: none waits without an end.
wait_until() {
  local limit=$1 every=$2 what=$3 start=$SECONDS said=0
  shift 3
  until "$@"; do
    if ((SECONDS - start >= limit)); then
      echo "lab: $what: not within ${limit}s" >&2
      return 1
    fi
    if ((SECONDS - start >= said + 10)); then
      said=$((SECONDS - start))
      echo "lab: waiting for $what (${said}s)" >&2
    fi
    sleep "$every"
  done
}
