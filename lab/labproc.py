"""The lab's processes, found by what they are (command line, binary, mount namespace), and stopped.

One source for which process is a lab containerd daemon, which real or simulated node belongs to
which lab cluster, and how a process is stopped: lab/lab.sh, lab/realnode.sh and lab/simnode.sh
call it, and the tests import it. Two labs run side by side on one host (`make test` runs two), so
what one lab's `down` stops spares the other's nodes and the daemons inside them.

    python3 lab/labproc.py daemons gpuop-lab      # the lab daemons `lab.sh down gpuop-lab` stops
    python3 lab/labproc.py real-nodes gpuop-lab [KEEP_ROOT]
    python3 lab/labproc.py sim-nodes gpuop-lab
    python3 lab/labproc.py stop [--grace=S] "lab containerd daemons" 4167 4180
"""

import os
import signal
import sys
import time

STOP_GRACE_S = 10  # TERM's grace before KILL, as the playbook gives its daemon (operations/containerd.py)
OWNER = "lab"  # the file in a node's directory naming the lab cluster it belongs to


def _procs():
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


def lab_root(args: list) -> str:
    """The lab root a containerd daemon runs on, from its command line ("" for any other process):
    the playbook's layout, ``--root R/var/lib/containerd --state R/run/containerd --address
    R/run/containerd/containerd.sock`` (a containerd the host runs for itself has none of it).

        lab_root(["containerd", "--root", "/r/var/lib/containerd", "--state", "/r/run/containerd",
                  "--address", "/r/run/containerd/containerd.sock"]) -> "/r"
    """
    opts = dict(zip(args, args[1:]))  # each flag with the argument after it
    root = opts.get("--root", "")
    if not root.endswith("/var/lib/containerd"):
        return ""
    r = root[: -len("/var/lib/containerd")]
    if r and opts.get("--state") == f"{r}/run/containerd" and \
            opts.get("--address") == f"{r}/run/containerd/containerd.sock":
        return r
    return ""


def owner(node_dir: str) -> str:
    """The lab cluster a node's directory belongs to ("" when it records none: every lab's)."""
    try:
        with open(os.path.join(node_dir, OWNER)) as f:
            return f.read().strip()
    except OSError:
        return ""


def real_nodes() -> list:
    """Every real lab node's directory (ROOT/var/node) on this host: by its kubelet service's
    command line, or, the service gone, by the file holding its namespace (the mount table)."""
    found = set()
    for _, args in _procs():
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
    for pid, args in _procs():
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


def daemons(lab: str) -> list:
    """The lab containerd daemons that ``lab.sh down LAB`` stops: every one on the host, but
    those inside another lab's real node (its mount namespace)."""
    others = {_namespace(d) for d in real_nodes() if d not in mine([d], lab)} - {""}
    found = []
    for pid, args in _procs():
        if lab_root(args):
            try:
                ns = os.readlink(f"/proc/{pid}/ns/mnt")
            except OSError:
                continue
            if ns not in others:
                found.append(pid)
    return found


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
        print(f"{what} (pid {' '.join(map(str, killed))}) did not stop on TERM within {grace_s:g}s; killing",
              file=sys.stderr)
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
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "daemons" and len(args) == 1:
        print("\n".join(map(str, daemons(args[0]))))
    elif cmd == "real-nodes" and len(args) in (1, 2):
        keep = os.path.join(os.path.realpath(args[1]), "var", "node") if len(args) == 2 else None
        print("\n".join(d for d in mine(real_nodes(), args[0]) if d != keep))
    elif cmd == "sim-nodes" and len(args) == 1:
        print("\n".join(mine(sim_nodes(), args[0])))
    elif cmd == "stop" and args:
        grace = STOP_GRACE_S
        if args[0].startswith("--grace="):
            grace, args = float(args[0].split("=", 1)[1]), args[1:]
        pids = [int(p) for p in args[1:] if alive(int(p))]
        if pids:
            stop(args[0], pids, grace)
            print(f"stopped {args[0]} (pid {' '.join(map(str, pids))})", file=sys.stderr)
    else:
        print("usage: labproc.py daemons LAB | real-nodes LAB [KEEP_ROOT] | sim-nodes LAB | stop [--grace=S] WHAT PID...",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
