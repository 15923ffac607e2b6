"""The audit: read-only, names exactly the gaps between written and live (issue 6)."""

import json
import re

import pytest

from tests.helpers.kube import get, reset_lab, set_gpus
from tests.helpers.labcontainerd import DEBIAN, restart, write_dropin_keeping_runc
from tests.helpers.playbook import deploy, fresh_incident, tree

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

AUDIT = "audit.py"


def audit(root, *data, env=None):
    return deploy(root, *data, env=env, script=AUDIT)


def cluster_snapshot():
    found = {}
    for resource, ns in (
        ("runtimeclasses", None),
        ("nodes", None),
        ("namespaces", None),
        ("pods", "gpu-lab"),
        ("pods", "gpu-operator"),
        ("daemonsets", "gpu-operator"),
        ("configmaps", "gpu-operator"),
    ):
        for item in (get(resource, ns) or {"items": []})["items"]:
            meta = item["metadata"]
            # resourceVersion moves with kwok's heartbeats on nodes; spec and GPU status must not.
            key = (resource, meta.get("namespace"), meta["name"])
            found[key] = (
                meta["uid"],
                json.dumps(item.get("spec"), sort_keys=True),
                json.dumps(item.get("data"), sort_keys=True),
                json.dumps((item.get("status") or {}).get("allocatable"), sort_keys=True),
            )
    return found


def without_audit_json(root):
    """Every file but the audit's own report, and every directory's mode (``out/`` gains an entry)."""
    return {
        k: (mode, mtime if body is not None else None, body)
        for k, (mode, mtime, body) in tree(root).items()
        if k != "out/audit.json"
    }


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    return fresh_incident(tmp_path_factory, "audit")


def test_incident_end_state_names_exactly_its_four_gaps(incident):
    root = incident
    before = (cluster_snapshot(), without_audit_json(root))
    run = audit(root)
    assert run.code != 0
    result = json.loads((root / "out/audit.json").read_text())
    assert [(g["kind"], g["subject"]) for g in result["gaps"]] == [
        ("restart-takes-cri-down", "containerd"),
        ("handler-not-loaded", "nvidia"),
        ("runtimeclass-handler-not-loaded", "nvidia"),
        ("rollout-stalled", "gpu-operator/nvidia-container-toolkit"),
    ]
    assert result["handlers"] == {
        "written": ["runc", "nvidia"],
        "loaded": ["runc"],
        "loaded_source": "live",
        "containerd_version": "1.6.20",
        "after_restart": ["nvidia"],
        "restart_cri": "fails",
    }
    assert result["runtimeclasses"] == [
        {"name": "nvidia", "handler": "nvidia", "loaded": False, "pods": ["gpu-lab/cuda-probe"]}
    ]
    assert result["gaps"][0]["detail"].startswith(
        'a restart of containerd on this node takes CRI down: default_runtime_name "runc" has no runtime'
    )
    assert "cuda-probe" in result["gaps"][2]["detail"]
    assert "insufficient-memory" in result["gaps"][3]["detail"]
    assert {n["name"]: (n["advertised"], n["requested"]) for n in result["nodes"]} == {
        "lab-node-0": (4, 1),
        "lab-node-1": (20, 0),
        "lab-node-2": (0, 0),
    }
    assert list(result["pending"]) == ["Insufficient memory", "node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    # The table a person reads first, each line naming its view, and the verdict.
    assert re.search(r"\[@local\] written +runc,nvidia \(the main config and its drop-ins\)", run.log)
    assert re.search(r"\[@local\] loaded +runc \(live, through CRI of containerd 1.6.20\)", run.log)
    assert re.search(r"\[@local\] after restart +nvidia; CRI FAILS", run.log)
    assert "[@local] GAP" in run.log and re.search(r"\[@local\] verdict +4 gap\(s\)", run.log)
    assert "[@local] audit: 4 gap(s) between written and live" in run.log
    # Read-only: nothing in the lab changed, and a second audit changes nothing at all.
    assert (cluster_snapshot(), without_audit_json(root)) == before
    mtime = (root / "out/audit.json").stat().st_mtime_ns
    again = audit(root)
    assert "[@local] Error: executed 0 commands" in again.log  # only the verdict, nothing written
    assert (root / "out/audit.json").stat().st_mtime_ns == mtime


def test_a_lab_host_s_textfile_holds_the_fleet_s_series_for_its_audit(incident):
    """``--data textfile=PATH``: the lab host's audit in the fleet audit's series (one writer), on
    the lab host, written once and left alone by a rerun that finds the same."""
    from prometheus_client.parser import text_string_to_metric_families

    root, prom = incident, incident / "out/gpuop.prom"
    try:
        assert audit(root, f"textfile={prom}").code != 0
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(prom.read_text())
            for s in f.samples
        }
        assert samples[("gpuop_node_gap_count", (("node", "@local"),))] == 4
        for kind in (
            "restart-takes-cri-down",
            "handler-not-loaded",
            "runtimeclass-handler-not-loaded",
            "rollout-stalled",
        ):
            assert samples[("gpuop_node_gaps", (("kind", kind), ("node", "@local")))] == 1
        assert (
            samples[("gpuop_node_runtime_handler", (("handler", "nvidia"), ("node", "@local"), ("view", "written")))]
            == 1
        )
        assert (
            "gpuop_node_runtime_handler",
            (("handler", "nvidia"), ("node", "@local"), ("view", "loaded")),
        ) not in samples
        assert samples[("gpuop_node_cri_after_restart", (("node", "@local"), ("state", "fails")))] == 1
        assert samples[("gpuop_node_containerd_info", (("node", "@local"), ("version", "1.6.20")))] == 1
        mtime = prom.stat().st_mtime_ns
        assert "[@local] Error: executed 0 commands" in audit(root, f"textfile={prom}").log
        assert prom.stat().st_mtime_ns == mtime
        refused = audit(root, "textfile=gpuop.prom")
        assert (
            refused.code != 0 and "textfile" in refused.log and "an absolute file path on the lab host" in refused.log
        )
    finally:
        prom.unlink(missing_ok=True)


def test_drift_shows_up_as_its_own_gap(incident):
    root = incident
    set_gpus("lab-node-1", 4)
    try:
        run = audit(root)
        gaps = json.loads((root / "out/audit.json").read_text())["gaps"]
        assert ("time-slicing-mismatch", "lab-node-1") in [(g["kind"], g["subject"]) for g in gaps]
        assert run.code != 0
    finally:
        restored = deploy(root)  # the lab as the other tests expect it, whatever failed above
    assert restored.code == 0, restored.log


def test_healthy_variant_finds_nothing(tmp_path):
    """The lab's containerd restarted with a drop-in that keeps runc (it holds nvidia, and would
    again after a restart), and a toolkit upgrade that fits."""
    reset_lab()
    root = tmp_path / "gpuop"
    assert deploy(root, "toolkit_memory_upgrade=256Mi").code == 0
    write_dropin_keeping_runc(root)
    restart(root, DEBIAN)
    run = audit(root, "toolkit_memory_upgrade=256Mi")
    assert run.code == 0, run.log
    result = json.loads((root / "out/audit.json").read_text())
    assert result["gaps"] == []
    assert result["handlers"] == {
        "written": ["runc", "nvidia"],
        "loaded": ["nvidia", "runc"],
        "loaded_source": "live",
        "containerd_version": "1.6.20",
        "after_restart": ["nvidia", "runc"],
        "restart_cri": "ok",
    }
    assert "no gap: written is loaded is scheduled" in run.log


def test_without_a_lab_containerd_every_line_says_recorded(incident):
    run = audit(incident, "containerd_binary=")
    assert run.code != 0  # the incident's gaps, on the recorded observation
    result = json.loads((incident / "out/audit.json").read_text())
    assert result["handlers"]["loaded_source"] == "recorded"
    assert result["gaps"][0]["kind"] == "handler-not-loaded"
    assert "(recorded: the incident day's observation, no lab containerd here)" in result["gaps"][0]["detail"]
    assert re.search(r"\[@local\] loaded +runc \(recorded\)", run.log)
    assert re.search(r"\[@local\] after restart +unknown", run.log)
    live = audit(incident)  # audit.json back to the live views
    assert live.code != 0
    assert json.loads((incident / "out/audit.json").read_text())["handlers"]["loaded_source"] == "live"
