"""Where one lab's containerd lives (``LabDaemon``), and the commands that start it, adopt it and
signal it; ``runbook.replay.containerd`` holds it at the incident's moment with them."""

import posixpath
import shlex
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import StringCommand

from runbook.reach.containerd import LabContainerd
from runbook.run import reads


@dataclass(frozen=True)
class LabDaemon:
    """Where one lab's containerd lives: its binary, config, and its own socket, state, root, pid
    and log, so that it never touches a containerd the host runs, nor /etc/containerd. The daemon
    is whatever process runs on its root (see ``LabContainerd``); the pid file is a cache.

        LabDaemon("/usr/bin/containerd", "crictl", ".../config.toml", ".../containerd.sock",
                  ".../run/containerd", ".../var/lib/containerd", ".../containerd.pid", ".../containerd.log")

    ``namespace``: the mount namespace (an nsfs file) it runs in, the lab's kubelet node's where a real
    kubelet runs Pods on it (their shims and the stand-in nvidia runtime are the node's), with the
    node's PID namespace beside it (``pid``, in the same folder); empty: the host's own.
    """

    binary: str
    crictl: str
    config: str
    socket: str
    state: str
    root: str
    pidfile: str
    log: str
    namespace: str = ""

    def args(self) -> list:
        """The daemon's command line: the lab's config, and its own root, state and socket."""
        return [
            self.binary,
            "--config",
            self.config,
            "--root",
            self.root,
            "--state",
            self.state,
            "--address",
            self.socket,
        ]

    def loaded_fact_args(self) -> dict:
        """What ``LabContainerd`` takes to find this daemon and ask it."""
        return {
            "pidfile": self.pidfile,
            "socket": self.socket,
            "root": self.root,
            "crictl": self.crictl,
            "log": self.log,
            "namespace": self.namespace,
        }

    def loaded(self) -> dict:
        """The loaded view, live (for waits): the daemons on this root and what CRI holds."""
        return host.get_fact(LabContainerd, **self.loaded_fact_args())

    def start(self) -> StringCommand:
        """Start the daemon in a session of its own (it outlives the run), recording its pid; in
        its namespace, where it has one."""
        dirs = [self.state, self.root, posixpath.dirname(self.pidfile), posixpath.dirname(self.log)]
        daemon = f"exec {shlex.join(self.args())} >>{shlex.quote(self.log)} 2>&1 </dev/null"
        if not self.namespace:
            inner = f"echo $$ >{shlex.quote(self.pidfile)}; {daemon}"
            return reads.containerd_changes(
                StringCommand(f"mkdir -p {shlex.join(dirs)} && setsid -f sh -c {shlex.quote(inner)}")
            )
        # The kubelet node's: its Pods' shims are its own release's, found beside it first. In the
        # node's PID namespace, $$ is not the pid the host sees: the host's is recorded once the
        # daemon runs (the process of this binary holding --root, as LabContainerd finds it),
        # within 20 s; none found by then is adopted by the next run.
        shims = shlex.quote(posixpath.dirname(self.binary))
        inner = f'PATH={shims}:"$PATH"; export PATH; {daemon}'
        pid_ns = posixpath.join(posixpath.dirname(self.namespace), "pid")
        record = (
            f"exe=$(readlink -f {shlex.quote(self.binary)}); pid=; for i in $(seq 200); do "
            f"for f in $(grep -lxzF -- {shlex.quote(self.root)} /proc/[0-9]*/cmdline 2>/dev/null); do "
            'p=${f#/proc/}; p=${p%/cmdline}; [ "$(readlink /proc/$p/exe)" = "$exe" ] && pid=$p; done; '
            f'[ -z "$pid" ] || break; sleep 0.1; done; echo "$pid" >{shlex.quote(self.pidfile)}'
        )
        return reads.containerd_changes(
            StringCommand(
                f"mkdir -p {shlex.join(dirs)} && nsenter --mount={shlex.quote(self.namespace)} "
                f"--pid={shlex.quote(pid_ns)} "
                f"-- setsid -f sh -c {shlex.quote(inner)} && {record}"
            )
        )

    def adopt(self, pid: int) -> StringCommand:
        """Record ``pid``, found holding the root, as the lab daemon's in its pid file."""
        return reads.containerd_changes(StringCommand(f"echo {pid} >{shlex.quote(self.pidfile)}"))

    @staticmethod
    def signal(pids, *signals) -> StringCommand:
        """Send ``signals`` in turn to the daemons ``pids`` (by pid, never by name: the host may
        run a containerd of its own); one already gone is no error."""
        listed = " ".join(str(p) for p in pids)
        return reads.containerd_changes(
            StringCommand("; ".join(f"kill -{s} {listed} 2>/dev/null" for s in signals) + "; true")
        )
