"""A lab host's views and the cluster around it, as the unit tests of the lab audit build them."""

import yaml

from gpuop.judgment.slots import sharing_config
from gpuop.judgment.view import restart_part, unknown_view
from tests.helpers import objects

DAEMON = {
    "pid": 7,
    "exe": "/usr/bin/containerd",
    "config": "/root/gpuop/etc/containerd/config.toml",
    "address": "/root/gpuop/run/containerd/containerd.sock",
    "binary": "/usr/bin/containerd",
}


TS = {"node": "n1", "physical_gpus": 4, "vram_per_gpu_gib": 40, "configmap": "gpu-operator/ts"}


node = objects.node


pod = objects.pod


def configmap(replicas):
    return {
        "kind": "ConfigMap",
        "metadata": {"name": "ts", "namespace": "gpu-operator"},
        "data": {"any": yaml.safe_dump(sharing_config(replicas))},
    }


RC = {"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


def runtime(written, loaded, loaded_from="cri", restart=None):
    """A lab containerd 1.6.20's view (a host without one where ``loaded_from`` is recorded)."""
    after = restart_part(restart, "1.6.20") if restart else {}
    return unknown_view(
        written=written,
        loaded=loaded,
        loaded_from=loaded_from,
        version="1.6.20",
        **after,
        **({} if loaded_from == "recorded" else {"daemon": DAEMON}),
    )
