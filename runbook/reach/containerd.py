"""Facts about the lab node's containerd: what the running daemon holds, and what a restart loads.

Three views of "the runtimes", and only one is live (see the README): the files (``Files``), the
running daemon asked through CRI (``LabContainerd``), and the binary's own merge of the files at
its next start (``ContainerdRestart``). None of them reads the host's own /etc/containerd.
"""

import base64
import shlex

from pyinfra.api import FactBase

from gpuop.layout import holds_root
from gpuop.reach.shell import cri_answer, restart_answer, shell_functions

_DAEMONS = "--- daemons"
_LOG = "--- log"
_CRI = "--- cri"
_NAMESPACE = "--- namespace"


class LabContainerd(FactBase):
    """
    The lab's containerd daemons and the runtime handlers the lab's socket serves, asked through
    CRI with ``crictl info``: the *loaded* view. A daemon is whatever process runs with the lab's
    ``--root`` on its command line, whatever a pid file says: a daemon whose pid file was lost, or
    whose root was removed under it, is still found. ``cri`` is ``ok``, or ``down`` when nothing
    answers on the socket within the deadline (no daemon, one without its CRI plugin, one that is
    stopped or hung), with crictl's own words in ``error``.

    .. code:: python

        host.get_fact(LabContainerd, pidfile="/root/gpuop/run/containerd.pid",
                      socket="/root/gpuop/run/containerd/containerd.sock",
                      root="/root/gpuop/var/lib/containerd")
        {"daemons": [{"pid": 4167, "state": "S", "mnt": "mnt:[4026531841]", "exe": "/usr/bin/containerd",
                      "args": ["/usr/bin/containerd", "--config", ...]}],
         "pid": 4167, "last_pid": 4167, "exe": "/usr/bin/containerd", "args": [...],
         "cri": "ok", "runtimes": ["runc"], "default_runtime": "runc", "error": "", "crictl": True}

    ``pid``, ``exe`` and ``args`` are the daemon's when exactly one holds the root (None and empty
    otherwise); ``state`` is the kernel's (``T``: stopped). ``last_pid`` is what the pid file (a
    cache) says, None when the lab never started one. ``crictl`` is False when there is no crictl.
    ``log`` is the last line of the daemon's log: what one that exited said last. Each daemon's
    ``mnt`` is its mount namespace (``mnt:[4026531841]``); with a ``namespace`` file given (the
    lab's kubelet node's, see lab/kubeletnode.sh), ``namespace`` is what it holds, in the same words, or
    empty when it holds none.
    """

    @staticmethod
    def default():
        return {
            "daemons": [],
            "pid": None,
            "last_pid": None,
            "exe": "",
            "args": [],
            "cri": "down",
            "runtimes": [],
            "default_runtime": "",
            "error": "not asked",
            "crictl": True,
            "log": "",
            "namespace": "",
        }

    def command(self, pidfile, socket, root, crictl="crictl", log="", namespace=""):
        self.root = root  # pyinfra calls process() on this same instance
        # grep -z reads each /proc/PID/cmdline as NUL-separated arguments: one process finds every
        # candidate (grep itself is one; process() keeps only `--root ROOT`). Per candidate: pid,
        # kernel state, mount namespace, command line, binary (last: it may end in " (deleted)").
        ns = shlex.quote(namespace or "/dev/null")
        return (
            shell_functions() + f'echo "$(cat {shlex.quote(pidfile)} 2>/dev/null)"; echo {_DAEMONS}; '
            f"for f in $(grep -lxzF -- {shlex.quote(root)} /proc/[0-9]*/cmdline 2>/dev/null); do "
            'p=${f%/cmdline}; a=$(base64 -w0 <"$f" 2>/dev/null); [ -n "$a" ] || continue; '
            'echo "${p#/proc/} $(sed \'s/.*) //; s/ .*//\' "$p/stat" 2>/dev/null) $(readlink "$p/ns/mnt") $a '
            '$(readlink "$p/exe")"; '
            f'done; echo {_NAMESPACE}; [ "$(stat -f -c %T {ns} 2>/dev/null)" != nsfs ] || echo "mnt:[$(stat -L -c '
            f'%i {ns})]"; '
            f"echo {_LOG}; tail -n 1 {shlex.quote(log or '/dev/null')} 2>/dev/null | cut -c1-300; echo {_CRI}; "
            + f"gpuop_cri {shlex.quote(crictl)} {shlex.quote(socket)}"
        )

    def process(self, output):
        last = output[0].strip()
        at_daemons, at_ns, at_log, at_cri = (
            output.index(_DAEMONS),
            output.index(_NAMESPACE),
            output.index(_LOG),
            output.index(_CRI),
        )
        daemons = []
        for line in output[at_daemons + 1 : at_ns]:
            pid, state, mnt, args, *exe = line.split(" ", 4)
            args = base64.b64decode(args).decode(errors="replace").split("\0")[:-1]
            daemons.append({"pid": int(pid), "state": state, "mnt": mnt, "args": args, "exe": " ".join(exe)})
        daemons = [d for d in daemons if holds_root(d["args"], self.root)]
        one = daemons[0] if len(daemons) == 1 else {"pid": None, "exe": "", "args": []}
        found = {
            "daemons": daemons,
            "pid": one["pid"],
            "exe": one["exe"],
            "args": one["args"],
            "last_pid": int(last) if last.isdigit() else None,
            "namespace": " ".join(output[at_ns + 1 : at_log]).strip(),
            "log": " ".join(output[at_log + 1 : at_cri]).strip(),
        }
        return {**found, **cri_answer(output[at_cri + 1 :])}


class ContainerdRestart(FactBase):
    """
    What the lab's containerd binary would load if the daemon restarted now: its version, and its
    own merge of the lab's config (the files on disk merged the way this binary merges them at
    start: its ``config dump``, or ``config migrate`` on the releases whose dump skips migrations),
    judged by its version's rules (``gpuop.judgment.containerd.restart_forecast``): whether the daemon
    starts, and whether its CRI loads. This never asks the running daemon. ``None`` where the
    binary is not on the host.

    .. code:: python

        host.get_fact(ContainerdRestart, binary="/usr/bin/containerd",
                      config="/root/gpuop/etc/containerd/config.toml")
        {"version": "1.6.20", "runtimes": ["nvidia"], "default_runtime": "runc",
         "cri_ok": False, "starts": True,
         "reason": 'default_runtime_name "runc" has no runtime in ...; containerd 1.6: an imported ...'}
    """

    @staticmethod
    def default():
        return None

    def command(self, binary, config):
        return f"{shell_functions()}gpuop_restart {shlex.quote(binary)} {shlex.quote(config)}"

    def process(self, output):
        return restart_answer(output)
