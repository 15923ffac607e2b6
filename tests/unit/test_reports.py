from gpuop.outputs.reports import incident_summary, key_values, render, stamp_holds, stamp_text
from tests.helpers.expected import MERGE, NODE_GPU, RESTART, ROLLOUT, SLOTS


def test_render_ends_every_line():
    assert render(["A=1", "B="]) == "A=1\nB=\n"
    assert render([]) == ""


def test_stamp_holds_only_for_the_same_text_and_inputs():
    report = render(["Unschedulable", "0/3 nodes are available: ..."])
    stamp = stamp_text(report, {"nodes": ["a", "b"]})
    assert stamp_holds(stamp, report, {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, report + "edited\n", {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, report, {"nodes": ["a"]})
    assert not stamp_holds(None, report, {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, None, {"nodes": ["a", "b"]})


INCIDENT = {
    "merge.txt": MERGE,
    "restart.txt": RESTART,
    "node-gpu.txt": NODE_GPU,
    "slots.txt": SLOTS,
    "rollout.txt": ROLLOUT,
    "unscheduled.txt": "Unschedulable\n0/3 nodes are available: 3 Insufficient nvidia.com/gpu.\n",
}


def test_key_values_keeps_equals_signs_in_values():
    assert key_values("A=1\nB=x=y\nno pair\n") == {"A": "1", "B": "x=y"}


def test_incident_summary_names_each_view_and_its_report():
    lines = incident_summary("@local", "/root/gpuop/out", INCIDENT)
    assert lines[0] == "What the incident showed on @local (reports in /root/gpuop/out):"
    by_view = {line.split()[0]: line for line in lines[1:]}
    assert list(by_view) == ["written", "loaded", "restart", "scheduled", "GPUs", "slots", "rollout"]
    assert (
        'drop-in nvidia, which replaces plugins."io.containerd.grpc.v1.cri".containerd.runtimes' in by_view["written"]
    )
    assert by_view["loaded"].split()[1:3] == ["runc,", "from"] and "cri" in by_view["loaded"]
    assert (
        'containerd 1.6.20 would load nvidia; its CRI fails: default_runtime_name "runc" has no runtime'
    ) in by_view["restart"]
    assert "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in by_view["scheduled"]
    assert "lab-node-0 4, lab-node-1 0, lab-node-2 0 (node-gpu.txt)" in by_view["GPUs"]
    assert "20 advertised from 4 GPUs x 5; 0 GiB guaranteed per slot, isolation none" in by_view["slots"]
    assert "1/3 updated, 2 Ready, 2 on the old image; blocker insufficient-memory" in by_view["rollout"]
    assert all(line.endswith(")") for line in lines[1:])


def test_incident_summary_of_a_restart_that_loads():
    restart = RESTART.replace("RESTART_CRI=fails", "RESTART_CRI=ok").replace(
        "RESTART_RUNTIMES=nvidia", "RESTART_RUNTIMES=nvidia,runc"
    )
    lines = incident_summary("lab-a", "/srv/gpuop/out", {**INCIDENT, "restart.txt": restart})
    assert "would load nvidia,runc; CRI ok (restart.txt)" in lines[3]
