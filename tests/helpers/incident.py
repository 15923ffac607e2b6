"""The incident's end state on the real lab, as SPEC fixes it: what a converged run leaves."""

import os

from tests.helpers.expected import MERGE, NODE_GPU, RESTART, ROLLOUT, SLOTS
from tests.helpers.kube import get
from tests.helpers.labcontainerd import lab_daemons, loaded
from tests.helpers.playbook import tree

DS = "daemonset/nvidia-container-toolkit"
REPORTS = ("merge.txt", "restart.txt", "unscheduled.txt", "node-gpu.txt", "slots.txt", "rollout.txt")
MANIFESTS = ("runtimeclass.yaml", "gpu-pod.yaml", "time-slicing.yaml", "toolkit-ds.yaml")


def lab_files(root) -> dict:
    """Every file under the root but backups, with its mode: ``{path: (mode, bytes)}``."""
    return {
        rel: (mode, body)
        for rel, (mode, _, body) in tree(root).items()
        if body is not None and ".gpuop-bak." not in rel
    }


def assert_incident_end_state(root, fresh):
    """The root holds what a fresh run wrote (bodies and modes), the reports are SPEC's, the lab
    containerd is one daemon holding runc alone, and the cluster is at the incident's end."""
    assert lab_files(root) == fresh
    out = {r: (root / "out" / r).read_text() for r in REPORTS}
    assert (out["merge.txt"], out["restart.txt"], out["node-gpu.txt"], out["slots.txt"], out["rollout.txt"]) == (
        MERGE,
        RESTART,
        NODE_GPU,
        SLOTS,
        ROLLOUT,
    )
    assert len(lab_daemons(root)) == 1, lab_daemons(root)  # one lab daemon per root, ever
    assert loaded(root) == ["runc"]  # the lab containerd holds runc alone, the drop-in on disk
    assert os.access(root / "bin/check-runtime.sh", os.X_OK)
    pod = get("pod/cuda-probe", "gpu-lab")
    assert (pod["status"]["phase"], pod["spec"]["nodeName"]) == ("Running", "lab-node-0")
    assert get("runtimeclass/nvidia")["handler"] == "nvidia"
    caps = {
        n: get(f"node/{n}")["status"]["allocatable"].get("nvidia.com/gpu")
        for n in ("lab-node-0", "lab-node-1", "lab-node-2")
    }
    assert caps == {"lab-node-0": "4", "lab-node-1": "20", "lab-node-2": None}
    status = get(DS, "gpu-operator")["status"]
    assert (status["updatedNumberScheduled"], status["numberReady"]) == (1, 2)
