"""A CRI-O node's read and the objects around it, as the unit tests build them."""

import os
from functools import partial

from gpuop.judgment import crio
from gpuop.judgment.view import unknown_view
from tests.helpers import objects

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "unit", "data")  # what CRI-O 1.36.3 printed


# What the lab's CRI-O 1.36.3 answered `crictl runp --runtime nvidia` (a sandbox on the host
# network) while it held runc only: Go's print of its runtime map, a pointer per handler.
RUNP_SAID = (
    "rpc error: code = Unknown desc = failed to find runtime handler nvidia from runtime list map[runc:0x1c0ab90408c0]"
)


def data(name: str) -> str:
    with open(os.path.join(DATA, name)) as f:
        return f.read()


def merge_lines(binaries: list) -> list:
    return ["Version: 1.36.3", *data("crio-1.36.3-config.toml").splitlines(), crio.PATHS, *binaries]


THERE = ["crun||no", "nvidia|/usr/bin/nvidia-container-runtime|yes", "runc|/usr/sbin/runc|yes"]


def crio_view(**given) -> dict:
    base = {
        "version": "1.36.3",
        "loaded": ["runc"],
        "loaded_from": "cri",
        "default_runtime": "runc",
        "written": ["runc"],
        "after_restart": ["runc"],
        "cri_after_restart": "ok",
        "cdi": {"enabled": True, "spec_dirs": ["/etc/cdi"], "gpu_specs": []},
        "daemon": {
            "pid": 7,
            "exe": "/usr/bin/crio",
            "config": "/etc/crio/crio.conf",
            "config_dir": "/etc/crio/crio.conf.d",
            "address": "/var/run/crio/crio.sock",
            "binary": "/usr/bin/crio",
        },
    }
    return unknown_view(runtime=crio.NAME, **{**base, **given})


node = partial(objects.node, gpus=8)


def rc(name: str) -> dict:
    return {"kind": "RuntimeClass", "metadata": {"name": name}, "handler": name}


pod = partial(objects.pod, namespace="ml", phase="Pending")


RELOADED_SAID = "Failed to create pod sandbox: rpc error: code = Unknown desc = " + RUNP_SAID.split("desc = ")[1]


STARTED = 1796357000  # 2026-12-04T04:03:20Z


def refused_event(pod_name: str, at: str, source: dict | None = None) -> dict:
    """The kubelet's sandbox failure as gpu-a's kubelet writes it (``source``: another's)."""
    return {
        "kind": "Event",
        "reason": "FailedCreatePodSandBox",
        "message": RELOADED_SAID,
        "lastTimestamp": at,
        "involvedObject": {"kind": "Pod", "name": pod_name},
        "metadata": {"name": f"{pod_name}.1", "creationTimestamp": at},
        "source": source or {"component": "kubelet", "host": "gpu-a"},
        "reportingComponent": "kubelet",
        "reportingInstance": (source or {}).get("host", "gpu-a"),
    }


def no_sandbox(p: dict, there: bool = False) -> dict:
    p["status"]["conditions"] = [{"type": "PodReadyToStartContainers", "status": str(there)}]
    return p


def reloaded_view(started=STARTED) -> dict:
    """CRI-O after a SIGHUP that brought nvidia: its status names it (cri-o#10202)."""
    view = crio_view(written=["runc", "nvidia"], loaded=["nvidia", "runc"], after_restart=["nvidia", "runc"])
    return {**view, "daemon": {**view["daemon"], "started": started}}
