#!/bin/sh
# Will the nvidia runtime be there after containerd starts? Asks containerd itself for its merge of
# the config (`containerd config dump`: the main config and the drop-ins its imports reach, merged
# the way this binary merges them at its next start), never by reading a config file here.
# This is not what the RUNNING daemon holds: `config dump` does not ask the daemon, so a drop-in
# written after containerd started passes here while the daemon still lacks it. For the running
# daemon, ask it through CRI: check-loaded.sh beside this script.
# Exit 0: the dump has the containerd.runtimes.nvidia table. Exit 1: it has not, or containerd
# is missing or cannot answer (with the reason on stderr).
if ! command -v containerd >/dev/null 2>&1; then
  echo "check-runtime: containerd not found on PATH; nothing to ask" >&2
  exit 1
fi
if ! dump=$(containerd config dump); then
  echo "check-runtime: 'containerd config dump' failed; containerd cannot read its config" >&2
  exit 1
fi
# The nvidia table itself ([...containerd.runtimes.nvidia] or one of its subtables), quoted or
# bare; a runtime merely named like it (nvidia-cdi) does not count.
if printf '%s\n' "$dump" | grep -Eq '^[[:space:]]*\[.*containerd\.runtimes\.("nvidia"|nvidia)[].]'; then
  echo "check-runtime: nvidia runtime in containerd's merged config (check-loaded.sh: is it loaded?)"
  exit 0
fi
echo "check-runtime: nvidia runtime NOT in containerd's merged config (is the drop-in in an imports glob? does it replace a section?)" >&2
exit 1
