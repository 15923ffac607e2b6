"""Where the lab's files live under its root."""

import posixpath
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """Every path the playbook writes, derived from the root.

        Layout("/root/gpuop").main_config -> "/root/gpuop/etc/containerd/config.toml"
    """

    root: str

    def _at(self, *parts):
        return posixpath.join(self.root, *parts)

    @property
    def containerd_dir(self):
        return self._at("etc", "containerd")

    @property
    def main_config(self):
        return self._at("etc", "containerd", "config.toml")

    @property
    def dropin_dir(self):
        return self._at("etc", "containerd", "conf.d")

    @property
    def dropin_glob(self):
        return self._at("etc", "containerd", "conf.d", "*.toml")

    @property
    def nvidia_dropin(self):
        return self._at("etc", "containerd", "conf.d", "99-nvidia.toml")

    @property
    def bin_dir(self):
        return self._at("bin")

    @property
    def check_script(self):
        return self._at("bin", "check-runtime.sh")

    @property
    def k8s_dir(self):
        return self._at("k8s")

    def manifest(self, name):
        return self._at("k8s", name)

    @property
    def out_dir(self):
        return self._at("out")

    def report(self, name):
        return self._at("out", name)

    @property
    def state_dir(self):
        """Bookkeeping of the playbook itself (moment stamps), apart from the lab's files."""
        return self._at(".gpuop")

    def stamp(self, report_name):
        return self._at(".gpuop", report_name + ".stamp")
