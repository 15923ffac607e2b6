"""Facts about a real node: the containerd that runs on it and the kubelet that talks to it.

A real node is not a lab root: its containerd runs under systemd with flags of its own, or none.
Everything is found from the processes, never assumed, and read in one command that writes
nothing (no temporary file, no socket left behind).
"""

import shlex

from pyinfra.api import FactBase

from gpuop.reach.node_read import node_read, parse
from gpuop.reach.shell import shell_functions


class NodeRuntime(FactBase):
    """
    What runs on a real node, read-only and in one command (k3s's multicall too: its containerd by
    argv[0], its kubelet inside the k3s process); its hostname; kubelet's command line
    and the endpoint it uses (``--container-runtime-endpoint``, else ``containerRuntimeEndpoint``
    of its ``--config`` and ``--config-dir`` drop-ins, YAML or JSON, else its default); every containerd process (found
    by its
    binary's name, whatever its flags), each with its binary (``/proc/PID/exe``), command line,
    ``--config`` (default /etc/containerd/config.toml) and socket (``--address``, else the
    config's ``grpc.address``, else the default). The three views are read for the one daemon
    that ``serves``, the node's runtime (kubelet's; with no kubelet, the only one, or the one on
    the default socket): the files written (its config, the files its imports reach, its
    conf.d, and the k3s/RKE2 templates beside it), the NVIDIA runtime binaries where k3s looks
    at start (``nvidia_runtimes``: what its next start registers, ``gpuop.judgment.regen``), what it
    holds (``crictl info`` on its socket) and what its binary's next start would load
    (``config dump``, see ``gpuop_restart`` in ``gpuop/reach/shell.sh``).

    .. code:: python

        host.get_fact(NodeRuntime, crictl="crictl")
        {"hostname": "gpu-a",
         "kubelet": {"pid": 901, "exe": "/usr/bin/kubelet", "args": [...],
                     "endpoint": "/run/containerd/containerd.sock"},  # None without a kubelet
         "containerds": [{"pid": 812, "exe": "/usr/bin/containerd", "args": ["/usr/bin/containerd"],
                          "binary": "/usr/bin/containerd",  # what the restart view runs
                          "config": "/etc/containerd/config.toml",
                          "address": "/run/containerd/containerd.sock", "serves": True,
                          "files": {"/etc/containerd/config.toml": {"mode": "644", "text": "..."}},
                          "loaded": {"cri": "ok", "runtimes": ["runc"], ...}, "nvidia_runtimes": [],
                          "started": 1796380000,  # when it started, seconds since the epoch
                          "restart": {"version": "1.6.20", "runtimes": ["runc"], "cri_ok": True, ...}}]}

    Every CRI-O (``crios``, found by its binary's name ``crio``) the same way, with its
    ``config_dir`` (``--config-dir``, default /etc/crio/crio.conf.d) and socket (``--listen``, else
    the last ``listen`` of its files, else /var/run/crio/crio.sock); where it serves, its files are
    its config and drop-ins, ``restart`` its binary's own merge (``crio config``, ``gpuop.judgment.crio``)
    and ``hooks`` the OCI hook files naming NVIDIA's hook in the directories it reads.

    A section of the read that did not end within its deadline is in ``unread`` (``gpuop.reach.node_read.parse``).

    A daemon that does not serve has ``serves`` False, and empty ``files``, ``loaded`` and
    ``restart``: asking its CRI would not be read-only (a containerd writes its introspection
    uuid at its first CRI Status).
    """

    @staticmethod
    def default():
        return {"hostname": "", "containerds": [], "crios": [], "kubelet": None, "unread": {}}

    def command(self, crictl="crictl", deadline_s=150):
        return node_read(crictl, deadline_s)

    def process(self, output):
        return parse(output)


TOOLKIT_DIRS = ("/usr/local/nvidia/toolkit",)  # where the GPU Operator installs nvidia-ctk, off PATH
_DROPIN_MARK, _ROOT_MARK = "Drop-in config:", "Top-level config:"


class ToolkitDropin(FactBase):
    """
    The node's own nvidia-ctk (on PATH, else where the GPU Operator installs it) and the drop-in it
    would write for the node's containerd (or ``runtime`` "crio": CRI-O): ``nvidia-ctk runtime configure --dry-run``,
    which
    prints the drop-in and the root config it would write and writes nothing. None where the node
    has no nvidia-ctk.

    .. code:: python

        host.get_fact(ToolkitDropin, config="/etc/containerd/config.toml",
                      dropin="/etc/containerd/conf.d/99-nvidia.toml")
        {"path": "/usr/bin/nvidia-ctk", "version": "1.20.2", "dropin": "version = 2\n...", "said": ""}
    """

    @staticmethod
    def default():
        return None

    def command(self, config, dropin, runtime="containerd", timeout_s=30):
        args = " ".join(shlex.quote(a) for a in (runtime, config, dropin, str(int(timeout_s)), *TOOLKIT_DIRS))
        return f"{shell_functions()}gpuop_toolkit_dropin {args}"

    def process(self, output):
        if not output:
            return None
        path, version_line, *said = list(output) + [""]
        words = version_line.split()  # "NVIDIA Container Toolkit CLI version 1.20.2"
        version = words[words.index("version") + 1] if "version" in words[:-1] else "unknown"
        marks = [i for i, line in enumerate(said) if _DROPIN_MARK in line or _ROOT_MARK in line]
        start = next((i for i in marks if _DROPIN_MARK in said[i]), None)
        if start is None:  # it said something else: its words, no drop-in
            return {
                "path": path,
                "version": version,
                "dropin": "",
                "said": " ".join(x for x in said if x.strip())[:300],
            }
        end = next((i for i in marks if i > start), len(said))
        text = "\n".join(said[start + 1 : end]).strip("\n")
        return {"path": path, "version": version, "dropin": text + "\n" if text else "", "said": ""}
