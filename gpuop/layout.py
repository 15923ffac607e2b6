"""Where the lab's files live under its root, and which process is a lab daemon on one."""

import posixpath
from dataclasses import dataclass
from datetime import datetime


def backup_of(path: str) -> str:
    """Where a file the playbook replaces is kept: beside it, named for this moment. ``path`` may
    be a shell word (``$t``): the name is only appended.

        backup_of("/root/gpuop/bin/check-runtime.sh") -> ".../check-runtime.sh.gpuop-bak.20261201T081500.123456"
    """
    return f"{path}.gpuop-bak.{datetime.now():%Y%m%dT%H%M%S.%f}"


# The fleet repair's backups on a node: outside every directory a runtime reads, since a copy
# beside the file (a conf.d/* import, CRI-O's crio.conf.d) would be merged after the new one.
NODE_BACKUPS = "/var/lib/gpuop/backup"


def node_backup_of(path: str, run: str) -> str:
    """Where the fleet repair keeps a node's file before it replaces it: under ``NODE_BACKUPS``,
    named after the run and the file's own path.

        node_backup_of("/etc/containerd/conf.d/99-nvidia.toml", "20261204T190102-4242")
        -> "/var/lib/gpuop/backup/20261204T190102-4242/etc/containerd/conf.d/99-nvidia.toml"
    """
    return posixpath.join(NODE_BACKUPS, run, path.lstrip("/"))


STOP_GRACE_S = 10  # how long a lab daemon has to stop on TERM before it is killed (the playbook's and the lab's)


def holds_root(args: list, store: str) -> bool:
    """Whether a command line is a containerd's on the store ``store`` (``--root STORE``): one
    root, one daemon, whatever its pid file or socket says.

        holds_root(["containerd", "--config", "c.toml", "--root", "/r/var/lib/containerd"], "/r/var/lib/containerd") ->
            True
    """
    return any(a == "--root" and b == store for a, b in zip(args, args[1:]))


@dataclass(frozen=True)
class Layout:
    """Every path the playbook writes, derived from the root.

    Layout("/root/gpuop").config_toml -> "/root/gpuop/etc/containerd/config.toml"
    """

    root: str

    def _at(self, *parts):
        return posixpath.join(self.root, *parts)

    @property
    def config_toml(self):
        return self._at("etc", "containerd", "config.toml")

    @property
    def dropin_glob(self):
        return self._at("etc", "containerd", "conf.d", "*.toml")

    @property
    def nvidia_dropin(self):
        return self._at("etc", "containerd", "conf.d", "99-nvidia.toml")

    @property
    def dropins_aside(self):
        """Where drop-ins wait while the lab's containerd starts with the main config alone."""
        return self._at(".gpuop", "conf.d-aside")

    @property
    def nvidia_ctk_scratch(self):
        """Where nvidia-ctk gets a copy of the main config to rewrite (it rewrites the one it is given)."""
        return self._at(".gpuop", "nvidia-ctk")

    @property
    def containerd_socket(self):
        """The lab containerd's own socket, state, root, pid and log: never the host's."""
        return self._at("run", "containerd", "containerd.sock")

    @property
    def containerd_state(self):
        return self._at("run", "containerd")

    @property
    def containerd_root(self):
        return self._at("var", "lib", "containerd")

    @property
    def containerd_pid(self):
        return self._at("run", "containerd.pid")

    @property
    def containerd_log(self):
        return self._at("var", "log", "containerd.log")

    @property
    def kubelet_node_dir(self):
        """The lab's kubelet node's own files (lab/kubeletnode.sh): its namespace, kubelet, overlays, CNI."""
        return self._at("var", "node")

    @property
    def kubelet_node_namespace(self):
        """The mount namespace the kubelet node's kubelet and containerd run in (an nsfs file)."""
        return posixpath.join(self.kubelet_node_dir, "mnt")

    @property
    def kubelet_node_cni(self):
        """The kubelet node's CNI plugins and network config: ``(bin_dir, conf_dir)``."""
        return posixpath.join(self.kubelet_node_dir, "cni", "bin"), posixpath.join(
            self.kubelet_node_dir, "cni", "net.d"
        )

    @property
    def check_script(self):
        return self._at("bin", "check-runtime.sh")

    @property
    def check_loaded_script(self):
        return self._at("bin", "check-loaded.sh")

    def manifest(self, name):
        return self._at("k8s", name)

    def report(self, name):
        return self._at("out", name)

    def stamp(self, report_name):
        """Where the playbook's own bookkeeping records a captured moment (not a lab file)."""
        return self._at(".gpuop", report_name + ".stamp")

    @classmethod
    def of_daemon(cls, args: list):
        """The lab whose containerd a command line runs, by the layout on it (``--root``,
        ``--state`` and ``--address`` of one root); None for any other process (the host's own
        containerd has none of it).

            Layout.of_daemon(["containerd", "--root", "/r/var/lib/containerd", "--state", "/r/run/containerd",
                              "--address", "/r/run/containerd/containerd.sock"]) -> Layout("/r")
        """
        opts = dict(zip(args, args[1:]))  # each flag with the argument after it
        store, tail = opts.get("--root", ""), "/var/lib/containerd"
        lab = cls(store[: -len(tail)]) if store.endswith(tail) and len(store) > len(tail) else None
        if lab and opts.get("--state") == lab.containerd_state and opts.get("--address") == lab.containerd_socket:
            return lab
        return None

    def owned_files(self, manifests, reports):
        """Every file the playbook writes (backups excluded: those are never removed)."""
        return (
            [
                self.config_toml,
                self.nvidia_dropin,
                self.check_script,
                self.check_loaded_script,
                self.stamp("restart"),
            ]  # the repair's restart, for what reports on it after
            + [self.manifest(m) for m in manifests]
            + [p for r in reports for p in (self.report(r), self.stamp(r))]
        )
