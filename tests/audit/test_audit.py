"""The audit: read-only, names exactly the gaps between written and live (issue 6)."""

import json
import re

import pytest

from tests.kube import get, reset_lab, set_gpus
from tests.expected import LOADED_NVIDIA
from tests.playbook import deploy, fake_containerd, fresh_incident, tree

AUDIT = "audit.py"


def audit(root, *data, env=None):
    return deploy(root, *data, env=env, script=AUDIT)


def cluster_snapshot():
    found = {}
    for resource, ns in (("runtimeclasses", None), ("nodes", None), ("namespaces", None),
                         ("pods", "gpu-lab"), ("pods", "gpu-operator"), ("daemonsets", "gpu-operator"),
                         ("configmaps", "gpu-operator")):
        for item in (get(resource, ns) or {"items": []})["items"]:
            meta = item["metadata"]
            # resourceVersion moves with kwok's heartbeats on nodes; spec and GPU status must not.
            key = (resource, meta.get("namespace"), meta["name"])
            found[key] = (meta["uid"], json.dumps(item.get("spec"), sort_keys=True),
                          json.dumps(item.get("data"), sort_keys=True),
                          json.dumps((item.get("status") or {}).get("allocatable"), sort_keys=True))
    return found


def without_audit_json(root):
    """Every file but the audit's own report, and every directory's mode (``out/`` gains an entry)."""
    return {k: (mode, mtime if body is not None else None, body)
            for k, (mode, mtime, body) in tree(root).items() if k != "out/audit.json"}


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    return fresh_incident(tmp_path_factory, "audit")


def test_incident_end_state_names_exactly_the_three_gaps(incident):
    root = incident
    before = (cluster_snapshot(), without_audit_json(root))
    run = audit(root)
    assert run.code != 0
    result = json.loads((root / "out/audit.json").read_text())
    assert [(g["kind"], g["subject"]) for g in result["gaps"]] == [
        ("handler-not-loaded", "nvidia"),
        ("runtimeclass-handler-not-loaded", "nvidia"),
        ("rollout-stalled", "gpu-operator/nvidia-container-toolkit"),
    ]
    assert result["handlers"] == {"written": ["runc", "nvidia"], "loaded": ["runc"],
                                  "loaded_source": "recorded"}
    assert result["runtimeclasses"] == [{"name": "nvidia", "handler": "nvidia", "loaded": False,
                                         "pods": ["gpu-lab/cuda-probe"]}]
    assert "cuda-probe" in result["gaps"][1]["detail"]
    assert "insufficient-memory" in result["gaps"][2]["detail"]
    assert {n["name"]: (n["advertised"], n["requested"]) for n in result["nodes"]} == {
        "lab-node-0": (4, 1), "lab-node-1": (20, 0), "lab-node-2": (0, 0)}
    assert list(result["pending"]) == ["Insufficient memory", "node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    # The table a person reads first, and the verdict.
    assert "[@local] GAP" in run.log and re.search(r"\[@local\] verdict +3 gap\(s\)", run.log)
    assert "[@local] audit: 3 gap(s) between written and live" in run.log
    # Read-only: nothing in the lab changed, and a second audit changes nothing at all.
    assert (cluster_snapshot(), without_audit_json(root)) == before
    mtime = (root / "out/audit.json").stat().st_mtime_ns
    again = audit(root)
    assert "[@local] Error: executed 0 commands" in again.log  # only the verdict, nothing written
    assert (root / "out/audit.json").stat().st_mtime_ns == mtime


def test_drift_shows_up_as_its_own_gap(incident):
    root = incident
    set_gpus("lab-node-1", 4)
    try:
        run = audit(root)
        gaps = json.loads((root / "out/audit.json").read_text())["gaps"]
        assert ("time-slicing-mismatch", "lab-node-1") in [(g["kind"], g["subject"]) for g in gaps]
        assert run.code != 0
    finally:
        assert deploy(root).code == 0


def test_healthy_variant_finds_nothing(tmp_path):
    """containerd (a fake one on PATH) holds nvidia, and the toolkit upgrade fits."""
    reset_lab()
    env, _ = fake_containerd(tmp_path, LOADED_NVIDIA)
    root = tmp_path / "gpuop"
    assert deploy(root, "toolkit_memory_upgrade=256Mi", env=env).code == 0
    run = audit(root, "toolkit_memory_upgrade=256Mi", env=env)
    assert run.code == 0, run.log
    result = json.loads((root / "out/audit.json").read_text())
    assert result["gaps"] == []
    assert result["handlers"]["loaded_source"] == "live"
    assert "no gap: written is loaded is scheduled" in run.log
