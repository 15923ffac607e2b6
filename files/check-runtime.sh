#!/bin/sh
# Is the nvidia runtime loaded? Ask the running containerd for the config it holds, never a file
# on disk: a drop-in that was written but never loaded is exactly what this must catch.
# Exit 0: the containerd.runtimes.nvidia table is loaded. Exit 1: it is not, or containerd
# is missing or cannot answer (with the reason on stderr).
if ! command -v containerd >/dev/null 2>&1; then
  echo "check-runtime: containerd not found on PATH; nothing loaded to check" >&2
  exit 1
fi
if ! dump=$(containerd config dump); then
  echo "check-runtime: 'containerd config dump' failed; the loaded config is unknown" >&2
  exit 1
fi
# The nvidia table itself ([...containerd.runtimes.nvidia] or one of its subtables), quoted or
# bare; a runtime merely named like it (nvidia-cdi) does not count.
if printf '%s\n' "$dump" | grep -Eq '^[[:space:]]*\[.*containerd\.runtimes\.("nvidia"|nvidia)[].]'; then
  echo "check-runtime: nvidia runtime loaded"
  exit 0
fi
echo "check-runtime: nvidia runtime NOT loaded (restart containerd after installing the drop-in?)" >&2
exit 1
