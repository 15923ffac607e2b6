"""Facts about the containerd that is running on the target."""

import tomllib

from pyinfra.api import FactBase

from gpuop.containerd import runtime_names


class LoadedRuntimes(FactBase):
    """
    Runtime handler names the running containerd holds, from its live config
    (``containerd config dump``), never from a file on disk. Ask ``Which("containerd")`` first:
    where containerd is absent there is nothing loaded to read.

    .. code:: python

        host.get_fact(LoadedRuntimes)
        ["runc", "nvidia"]
    """

    @staticmethod
    def default():
        return []

    def command(self):
        return "containerd config dump"

    def process(self, output):
        return runtime_names(tomllib.loads("\n".join(output)))
