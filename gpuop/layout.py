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
    def main_config(self):
        return self._at("etc", "containerd", "config.toml")

    @property
    def dropin_glob(self):
        return self._at("etc", "containerd", "conf.d", "*.toml")

    @property
    def nvidia_dropin(self):
        return self._at("etc", "containerd", "conf.d", "99-nvidia.toml")

    @property
    def check_script(self):
        return self._at("bin", "check-runtime.sh")

    def manifest(self, name):
        return self._at("k8s", name)

    def report(self, name):
        return self._at("out", name)

    def stamp(self, report_name):
        """Where the playbook's own bookkeeping records a captured moment (not a lab file)."""
        return self._at(".gpuop", report_name + ".stamp")

    def owned_files(self, manifests, reports):
        """Every file the playbook writes (backups excluded: those are never removed)."""
        return ([self.main_config, self.nvidia_dropin, self.check_script]
                + [self.manifest(m) for m in manifests]
                + [p for r in reports for p in (self.report(r), self.stamp(r))])
