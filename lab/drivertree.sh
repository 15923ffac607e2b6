# A node's NVIDIA driver files, planted under a tree as the node holds them (tests/helpers/drivers.py
# makes them), laid over a mount namespace's own paths: sourced by lab/simnode.sh inside a
# simulated node, and by the driver tests' own namespace. Nothing of the host's is touched.

# lay_driver TREE: TREE's files over this mount namespace's. Read-only overlays with the
# namespace's own files beneath where the file system takes one (sysfs's modules and PCI devices,
# /usr/lib, /usr/bin, /usr/src, /etc, /var, and /run unless LAY_RUN=copy: a writable tmpfs /run
# gets TREE's files copied in); binds where it takes none (/proc/driver) or the host has nothing
# to keep (/boot). Only what TREE has is laid.
lay_driver() {
  local tree=$1 d
  for d in proc/driver boot; do
    [ ! -d "$tree/$d" ] || mount --bind "$tree/$d" "/$d"
  done
  for d in sys/module sys/bus/pci/devices usr/lib usr/bin usr/src etc var run; do
    [ -d "$tree/$d" ] || continue
    if [ "$d" = run ] && [ "${LAY_RUN:-}" = copy ]; then
      cp -a "$tree/run/." /run/
    else
      mount -t overlay overlay -o "lowerdir=$tree/$d:/$d" "/$d"
    fi
  done
}
