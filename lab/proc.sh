# Finding the lab's processes by what they are (sourced by lab/simnode.sh and lab/realnode.sh).

# pids_with_arg ARG EXE: processes with the argument ARG on their command line whose binary is EXE.
pids_with_arg() {
  local f p
  for f in $(grep -lzxF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
    p=${f#/proc/}; p=${p%/cmdline}
    [[ $(readlink "/proc/$p/exe" 2>/dev/null) == */"$2" ]] && echo "$p"
  done
  return 0
}
