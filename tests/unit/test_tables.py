"""The audit's tables: a lab host and a fleet's node read alike, and the worst gap is read first."""

from gpuop.judgment.entry import node_entry
from gpuop.judgment.lab_audit import audit
from gpuop.outputs.tables import fleet_table, host_table, worst_first
from tests.helpers.labviews import RC, TS, configmap, node, pod, runtime

REFUSED = {
    "runtimes": [],
    "cri_ok": False,
    "starts": False,
    "reason": "containerd 2.3: drop-in config version 4 higher than root config version 2",
}


def refusing_host():
    """A lab host whose RuntimeClass handler is not loaded and whose containerd would not start again."""
    objects = [RC, pod("probe", "n0", "nvidia", gpus=1), node("n0", 4), node("n1", 20), configmap(5)]
    return audit(runtime(["runc", "nvidia"], ["runc"], restart=REFUSED), objects, TS)


def test_a_runtime_that_would_not_start_again_is_the_first_gap_on_both_tables():
    result = refusing_host()
    result["gaps"].reverse()  # found in any order, read worst first
    gaps = [line.split(None, 1)[1] for line in host_table(result) if line.startswith("GAP")]
    assert gaps == [
        "containerd 1.6.20 would not start at its next restart, so no Pod could start on this node: "
        "containerd 2.3: drop-in config version 4 higher than root config version 2",
        "RuntimeClass nvidia: handler nvidia not loaded; its Pods fail as soon as they are recreated: ns/probe",
        "runtime handler nvidia is written but not loaded (loaded, live through CRI of containerd 1.6.20)",
    ]
    healthy = node_entry(
        runtime(["runc"], ["runc"], restart={"runtimes": ["runc"], "cri_ok": True, "reason": "ok"}), []
    )
    lines = fleet_table({"nodes": {"a-healthy": healthy, "z-refusing": result}, "gaps": []})
    assert lines[1].startswith("a-healthy") and lines[2].startswith("z-refusing")  # rows in name order
    assert lines[3].startswith("GAP z-refusing: [restart-refuses-start]")  # its gaps first, the worst first


def test_a_node_s_handlers_read_the_same_on_both_tables():
    result = refusing_host()
    rows = {line.split("  ")[0].strip(): line for line in host_table(result)}
    fleet = fleet_table({"nodes": {"lab": result}, "gaps": []})
    assert "runc,nvidia (the main config and its drop-ins)" in rows["written"]
    assert "runc (live, through CRI of containerd 1.6.20)" in rows["loaded"]
    assert "-; containerd REFUSES TO START" in rows["after restart"]
    assert fleet[1].split()[:6] == ["lab", "containerd", "1.6.20", "runc", "-", "refuses-start"]


def test_worst_first_keeps_the_others_in_the_order_found():
    gaps = [{"kind": "a"}, {"kind": "restart-refuses-start"}, {"kind": "b"}]
    assert [g["kind"] for g in worst_first(gaps)] == ["restart-refuses-start", "a", "b"]
