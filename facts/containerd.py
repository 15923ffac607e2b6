"""Facts about the lab node's containerd: what the running daemon holds, and what a restart loads.

Three views of "the runtimes", and only one is live (see the README): the files (``Files``), the
running daemon asked through CRI (``LabContainerd``), and the binary's own merge of the files at
its next start (``ContainerdRestart``). None of them reads the host's own /etc/containerd.
"""

import base64
import json
import shlex
import tomllib

from pyinfra.api import FactBase

from gpuop.containerd import binary_version, cri_runtimes, restart_forecast, unreadable_config

_CRI = "--- cri"
_DUMP_FAILED = "--- dump failed"


class LabContainerd(FactBase):
    """
    The lab's containerd daemon (the process whose pid file and socket are the lab's own) and the
    runtime handlers it holds, asked through CRI with ``crictl info``: the *loaded* view. ``cri``
    is ``ok``, or ``down`` when nothing answers on the socket (the daemon is not running, or it
    runs without its CRI plugin), with crictl's own words in ``error``.

    .. code:: python

        host.get_fact(LabContainerd, pidfile="/root/gpuop/run/containerd.pid",
                      socket="/root/gpuop/run/containerd/containerd.sock")
        {"pid": 4167, "last_pid": 4167, "exe": "/usr/bin/containerd",
         "args": ["containerd", "--config", ...], "cri": "ok", "runtimes": ["runc"],
         "default_runtime": "runc", "error": "", "crictl": True}

    ``pid`` is None unless the lab daemon runs; ``last_pid`` is what its pid file says (None when
    the lab never started one), so a daemon that died can be told from one never started.
    ``crictl`` is False when there is no crictl to ask with.
    """

    @staticmethod
    def default():
        return {"pid": None, "last_pid": None, "exe": "", "args": [], "cri": "down", "runtimes": [],
                "default_runtime": "", "error": "not asked", "crictl": True}

    def command(self, pidfile, socket, crictl="crictl"):
        # The pid counts only while its process still serves the lab's socket (a pid is reused).
        pid = shlex.quote(pidfile)
        return (
            f'pid=$(cat {pid} 2>/dev/null); echo "$pid"; '
            f'if [ -n "$pid" ] && tr "\\0" "\\n" </proc/"$pid"/cmdline 2>/dev/null '
            f'| grep -qxF -- {shlex.quote(socket)}; then '
            'echo "$pid"; readlink /proc/"$pid"/exe; tr "\\0" "\\n" </proc/"$pid"/cmdline | base64 -w0; echo; '
            'else echo; echo; echo; fi; '
            f'echo {_CRI}; '
            f'{shlex.quote(crictl)} --config /dev/null --runtime-endpoint unix://{shlex.quote(socket)} '
            '--timeout 3s info 2>&1; echo "$?"'
        )

    def process(self, output):
        last, pid, exe, args = (line.strip() for line in output[:4])
        cri_at = output.index(_CRI)
        answer, status = "\n".join(output[cri_at + 1:-1]), output[-1].strip()
        found = {"pid": int(pid) if pid else None, "last_pid": int(last) if last.isdigit() else None,
                 "exe": exe,
                 "args": base64.b64decode(args).decode().split("\n")[:-1] if args else [],
                 "crictl": status != "127"}
        if status != "0":
            return {**found, "cri": "down", "runtimes": [], "default_runtime": "",
                    "error": answer.strip().splitlines()[-1] if answer.strip() else f"exit {status}"}
        runtimes, default = cri_runtimes(json.loads(answer))
        return {**found, "cri": "ok", "runtimes": runtimes, "default_runtime": default, "error": ""}


class ContainerdRestart(FactBase):
    """
    What the lab's containerd binary would load if the daemon restarted now: its version, and its
    own ``config dump`` of the lab's config (the files on disk merged the way this binary merges
    them at start), judged by the CRI plugin's rule. This never asks the running daemon. ``None``
    where the binary is not on the host.

    .. code:: python

        host.get_fact(ContainerdRestart, binary="/usr/bin/containerd",
                      config="/root/gpuop/etc/containerd/config.toml")
        {"version": "1.6.20", "runtimes": ["nvidia"], "default_runtime": "runc",
         "cri_ok": False, "reason": 'default_runtime_name "runc" has no runtime in ...'}
    """

    @staticmethod
    def default():
        return None

    def command(self, binary, config):
        b, c = shlex.quote(binary), shlex.quote(config)
        return (f"if [ -x {b} ]; then {b} --version; "
                f"{b} --config {c} config dump 2>/dev/null || "
                f"{{ echo {shlex.quote(_DUMP_FAILED)}; {b} --config {c} config dump 2>&1 | tail -n 3; }}; "
                "fi")

    def process(self, output):
        version, body = binary_version(output[0]), output[1:]
        if _DUMP_FAILED in body:
            error = " ".join(line.strip() for line in body[body.index(_DUMP_FAILED) + 1:])
            forecast = unreadable_config(error or "config dump failed")
        else:
            forecast = restart_forecast(tomllib.loads("\n".join(body)))
        return {"version": version, **forecast.__dict__}
