"""The lab's processes, found by what they are (command line, binary, mount namespace), and stopped.

One source for which process is a lab containerd daemon, which real or simulated node belongs to
which lab cluster, and how a process is stopped: lab/lab.sh, lab/kubeletnode.sh and lab/simnode.sh
call it, and the tests import it. Two labs run side by side on one host (`make test` runs two), so
what one lab's `down` stops spares the other's nodes and the daemons started for it or inside them.

    python3 lab/labproc.py daemons gpuop-lab      # the lab daemons `lab.sh down gpuop-lab` stops
    python3 lab/labproc.py kubelet-nodes gpuop-lab [KEEP_ROOT]
    python3 lab/labproc.py sim-nodes gpuop-lab
    python3 lab/labproc.py stop [--grace=S] "lab containerd daemons" 4167 4180
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project
from gpuop.layout import STOP_GRACE_S, Layout, holds_root  # the product's own rules, stdlib only

OWNER = "lab"  # the file in a node's directory naming the lab cluster it belongs to
LAB_ENV = b"GPUOP_LAB="  # the variable naming the lab a process was started for


def processes():
    """(pid, argv) of every process whose command line can be read."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    args = f.read().decode(errors="replace").split("\0")[:-1]
            except OSError:
                continue
            if args:
                yield int(name), args


def state(pid: int) -> str:
    """The kernel's state of ``pid`` (S, R, T: stopped, Z: a zombie); "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    return state(pid) not in ("", "Z")


def owner(node_dir: str) -> str:
    """The lab cluster a node's directory belongs to ("" when it records none: every lab's)."""
    try:
        with open(os.path.join(node_dir, OWNER)) as f:
            return f.read().strip()
    except OSError:
        return ""


def kubelet_nodes() -> list:
    """Every lab kubelet node's directory (ROOT/var/node) on this host: by its kubelet service's
    command line, or, the service gone, by the file holding its namespace (the mount table)."""
    found = set()
    for _, args in processes():
        found.update(os.path.dirname(a) for a in args if a.endswith("/var/node/kubelet.service"))
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.endswith("/var/node/mnt"):
                found.add(os.path.dirname(point))
    return sorted(found)


def sim_nodes() -> list:
    """Every simulated node's directory: the `unshare` running ``simnode.sh inside DIR``."""
    found = set()
    for pid, args in processes():
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if exe.endswith("/unshare") and "inside" in args[:-1] and any(a.endswith("/simnode.sh") for a in args):
            found.add(args[args.index("inside") + 1])
    return sorted(found)


def mine(dirs: list, lab: str) -> list:
    """The nodes of ``dirs`` that lab ``lab`` owns (one that records no lab is every lab's)."""
    return [d for d in dirs if owner(d) in ("", lab)]


def _namespace(node_dir: str) -> str:
    try:
        return f"mnt:[{os.stat(os.path.join(node_dir, 'mnt')).st_ino}]"
    except OSError:
        return ""


def started_for(pid: int) -> str:
    """The lab a process was started for: ``GPUOP_LAB`` in the environment it was started with
    (`make test` runs its second lane under it, and every daemon that lane starts inherits it);
    "" when it names none: every lab's, as a node that records none."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return ""
    named = [v[len(LAB_ENV) :] for v in env if v.startswith(LAB_ENV)]
    return named[0].decode(errors="replace") if named else ""


def daemons(lab: str) -> list:
    """The lab containerd daemons that ``lab.sh down LAB`` stops: every one on the host, but
    those started for another lab (``started_for``) or inside another lab's kubelet node (its mount
    namespace)."""
    others = {_namespace(d) for d in kubelet_nodes() if d not in mine([d], lab)} - {""}
    found = []
    for pid, args in processes():
        if Layout.of_daemon(args) and started_for(pid) in ("", lab):
            try:
                ns = os.readlink(f"/proc/{pid}/ns/mnt")
            except OSError:
                continue
            if ns not in others:
                found.append(pid)
    return found


def holding(store: str) -> list:
    """Every process running a containerd on the store ``store`` (``--root STORE``)."""
    return [pid for pid, args in processes() if holds_root(args, store)]


def under(path: str) -> list:
    """The lab daemons whose root is under ``path`` (a test's temporary roots)."""
    path = path.rstrip("/") + "/"
    return [pid for pid, args in processes() if (lab := Layout.of_daemon(args)) and lab.root.startswith(path)]


def stop(what: str, pids: list, grace_s: float = STOP_GRACE_S) -> list:
    """TERM ``pids`` (and CONT, so that a stopped one takes it), KILL those left after
    ``grace_s``; wait until all are gone. Returns the ones that needed KILL.

        stop("lab containerd daemons", [4167])  -> []

    Those of ``pids`` already gone are left out.
    """
    pids = [p for p in pids if alive(p)]

    def signal_all(sig, which):
        for pid in which:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    signal_all(signal.SIGTERM, pids)
    signal_all(signal.SIGCONT, pids)
    killed = wait_gone(pids, grace_s)
    if killed:
        print(
            f"{what} (pid {' '.join(map(str, killed))}) did not stop on TERM within {grace_s:g}s; killing",
            file=sys.stderr,
        )
        signal_all(signal.SIGKILL, killed)
        left = wait_gone(killed, grace_s)
        if left:
            raise SystemExit(f"{what} (pid {' '.join(map(str, left))}) still there {grace_s:g}s after KILL")
    return killed


def wait_gone(pids: list, timeout_s: float) -> list:
    """Wait up to ``timeout_s`` until none of ``pids`` is alive; the ones still alive."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def main(argv: list) -> int:
    cli = argparse.ArgumentParser(prog="lab/labproc.py", description=__doc__.splitlines()[0])
    sub = cli.add_subparsers(dest="cmd", required=True)
    sub.add_parser("daemons", help="the lab daemons `lab.sh down LAB` stops").add_argument("lab")
    real = sub.add_parser("kubelet-nodes", help="the kubelet nodes of LAB, but KEEP_ROOT's")
    real.add_argument("lab")
    real.add_argument("keep_root", nargs="?")
    sub.add_parser("sim-nodes", help="the simulated nodes of LAB").add_argument("lab")
    stopping = sub.add_parser("stop", help="TERM (and CONT), KILL after the grace")
    stopping.add_argument("--grace", type=float, default=STOP_GRACE_S)
    stopping.add_argument("what")
    stopping.add_argument("pids", nargs="*", type=int)
    a = cli.parse_args(argv)
    if a.cmd == "daemons":
        found = daemons(a.lab)
    elif a.cmd == "kubelet-nodes":
        keep = os.path.join(os.path.realpath(a.keep_root), "var", "node") if a.keep_root else None
        found = [d for d in mine(kubelet_nodes(), a.lab) if d != keep]
    elif a.cmd == "sim-nodes":
        found = mine(sim_nodes(), a.lab)
    else:
        found = []
        pids = [p for p in a.pids if alive(p)]
        if pids:
            stop(a.what, pids, a.grace)
            print(f"stopped {a.what} (pid {' '.join(map(str, pids))})", file=sys.stderr)
    for item in found:
        print(item)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
