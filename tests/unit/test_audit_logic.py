"""The audit's findings from live-shaped objects, without a cluster."""

import pytest

from gpuop.judgment.gaps import gap
from gpuop.judgment.lab_audit import audit
from gpuop.outputs.tables import host_table
from tests.helpers.labviews import RC, TS, configmap, node, pod, runtime

MEMORY = "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]."


def kinds(result):
    return [(g["kind"], g["subject"]) for g in result["gaps"]]


def test_written_but_not_loaded_and_the_runtimeclass_that_needs_it():
    objects = [RC, pod("probe", "n0", "nvidia", gpus=1), node("n0", 4), node("n1", 20), configmap(5)]
    result = audit(runtime(["runc", "nvidia"], ["runc"], "recorded"), objects, TS)
    assert kinds(result) == [("handler-not-loaded", "nvidia"), ("runtimeclass-handler-not-loaded", "nvidia")]
    assert result["runtimeclasses"][0]["pods"] == ["ns/probe"]
    assert "(recorded: the incident day's observation" in result["gaps"][0]["detail"]
    assert any(line.startswith("after restart") and "unknown" in line for line in host_table(result))


def test_a_restart_that_takes_cri_down_is_the_first_gap():
    objects = [RC, pod("probe", "n0", "nvidia", gpus=1), node("n0", 4), node("n1", 20), configmap(5)]
    restart = {"runtimes": ["nvidia"], "cri_ok": False, "reason": 'default_runtime_name "runc" has no runtime'}
    result = audit(runtime(["runc", "nvidia"], ["runc"], restart=restart), objects, TS)
    assert kinds(result) == [
        ("restart-takes-cri-down", "containerd"),
        ("handler-not-loaded", "nvidia"),
        ("runtimeclass-handler-not-loaded", "nvidia"),
    ]
    assert result["gaps"][0]["detail"].startswith(
        'a restart of containerd on this node takes CRI down: default_runtime_name "runc" has no runtime'
    )
    assert "(loaded, live through CRI of containerd 1.6.20)" in result["gaps"][1]["detail"]
    assert result["handlers"]["after_restart"] == ["nvidia"] and result["handlers"]["restart_cri"] == "fails"
    rows = {line.split("  ")[0].strip(): line for line in host_table(result)}
    assert "runc (live, through CRI of containerd 1.6.20)" in rows["loaded"]
    assert "nvidia; CRI FAILS" in rows["after restart"]
    assert "runc,nvidia (the main config and its drop-ins)" in rows["written"]


def test_each_gap_names_the_views_it_joins_as_the_fleet_audit_s_do():
    objects = [RC, pod("probe", "n0", "nvidia", gpus=1), node("n0", 4), node("n1", 20), configmap(5)]
    restart = {"runtimes": ["runc"], "cri_ok": False, "reason": "r"}
    result = audit(runtime(["runc", "nvidia"], ["runc"], restart=restart), objects, TS)
    assert [(g["kind"], g["views"]) for g in result["gaps"]] == [
        ("restart-takes-cri-down", ["after-restart"]),
        ("handler-not-loaded", ["written", "loaded"]),
        ("runtimeclass-handler-not-loaded", ["scheduled", "loaded"]),
    ]
    assert sorted(result["gaps"][0]) == ["detail", "kind", "subject", "views"]  # the fleet's shape
    overcommitted = audit(
        runtime(["runc"], ["runc"]), [node("n0", 1), node("n1", 4), configmap(5), pod("a", "n0", gpus=2)], TS
    )
    assert [(g["kind"], g["views"]) for g in overcommitted["gaps"]] == [
        ("gpus-overcommitted", ["scheduled"]),
        ("time-slicing-mismatch", ["written", "scheduled"]),
    ]
    with pytest.raises(
        ValueError, match="gap x: unknown view.s. seen; expected written, loaded, after-restart, scheduled"
    ):
        gap("x", "y", ["seen"], "z")


def test_a_daemon_whose_cri_is_down_is_a_gap_of_its_own():
    result = audit(runtime(["runc"], [], "cri-down"), [node("n0", 4), node("n1", 20), configmap(5)], TS)
    # nothing claimed that was not seen: with CRI down, no handler is said to be missing
    assert kinds(result) == [("cri-down", "containerd")]
    assert result["handlers"]["loaded_source"] == "cri-down"


def test_gpu_overcommit_and_time_slicing_mismatch():
    objects = [
        node("n0", 1),
        node("n1", 4),
        configmap(5),
        pod("a", "n0", gpus=1),
        pod("b", "n0", gpus=1),
        pod("c", "n1"),
    ]
    result = audit(runtime(["runc"], ["runc"]), objects, TS)
    assert kinds(result) == [("gpus-overcommitted", "n0"), ("time-slicing-mismatch", "n1")]
    assert {n["name"]: (n["advertised"], n["requested"]) for n in result["nodes"]} == {"n0": (1, 2), "n1": (4, 0)}
    assert "4 x 5 = 20" in result["gaps"][1]["detail"]


def test_pending_pods_grouped_by_reason_and_a_healthy_lab_has_no_gap():
    objects = [
        node("n0", 4),
        node("n1", 20),
        configmap(5),
        pod("p1", None, pending_message=MEMORY),
        pod("p2", None, pending_message=MEMORY),
    ]
    ok = {"runtimes": ["runc", "nvidia"], "cri_ok": True, "reason": ""}
    result = audit(runtime(["runc", "nvidia"], ["runc", "nvidia"], restart=ok), objects, TS)
    assert result["gaps"] == []
    # Time-slicing shares memory by design: a warning, never a gap.
    assert [(w["kind"], w["subject"]) for w in result["warnings"]] == [("time-sliced-memory-shared", "n1")]
    assert "a slot is guaranteed 0 GiB" in result["warnings"][0]["detail"]
    assert any(line.startswith("warning") and "share the GPU's whole 40 GiB" in line for line in host_table(result))
    assert result["pending"]["Insufficient memory"] == ["ns/p1", "ns/p2"]
    assert host_table(result)[-1].endswith("no gap: written is loaded is scheduled")


def test_on_a_kubelet_node_the_sandbox_forecast_is_held_against_the_kubelet_s_event():
    probe = pod("probe", "n0", "nvidia", gpus=1)
    probe["metadata"]["uid"] = "u1"

    def event(message):
        return {
            "kind": "Event",
            "reason": "FailedCreatePodSandBox",
            "message": message,
            "lastTimestamp": "2026-12-01T15:00:00Z",
            "metadata": {"name": "probe.1", "creationTimestamp": "2026-12-01T15:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "probe", "uid": "u1"},
        }

    said = (
        "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
        'no runtime for "nvidia" is configured'
    )
    objects = [RC, probe, node("n0", 4), node("n1", 20), configmap(5)]
    for events, agrees, words in (
        ([event(said)], True, "the kubelet's event agrees"),
        ([event("failed to pull image")], False, "says otherwise: failed to pull image"),
        ([], False, "no kubelet event for it yet"),
    ):
        result = audit(runtime(["runc", "nvidia"], ["runc"]), objects + events, TS, kubelet_node="n0")
        assert result["sandboxes"] == [
            {
                "pod": "ns/probe",
                "node": "n0",
                "handler": "nvidia",
                "agrees": agrees,
                "forecast": 'failed to get sandbox runtime: no runtime for "nvidia" is configured',
                "event": events[0]["message"] if events else None,
            }
        ]
        gap = next(g for g in result["gaps"] if g["kind"] == "sandbox-fails")
        assert gap["subject"] == "ns/probe" and gap["detail"].endswith(words)
    assert "sandboxes" not in audit(runtime(["runc", "nvidia"], ["runc"]), objects, TS)  # a kwok lab: as before


def test_the_kubelet_s_words_match_each_version_s_sandbox_error():
    from gpuop.judgment.containerd import sandbox_error
    from gpuop.judgment.sandbox import says_sandbox_error

    prefix = "Failed to create pod sandbox: rpc error: code = Unknown desc = "
    two = f'unable to get OCI runtime for sandbox "{"a1" * 32}": no runtime for "nvidia" is configured'
    assert says_sandbox_error(prefix + two, sandbox_error("2.4.2", "nvidia"))
    assert not says_sandbox_error(prefix + two, sandbox_error("1.6.20", "nvidia"))
    assert not says_sandbox_error(prefix + two.replace("nvidia", "kata"), sandbox_error("2.4.2", "nvidia"))


def test_on_a_kubelet_node_the_apis_view_of_loaded_is_read_and_held_against_cri():
    reported = node("n0", 4)
    reported["status"]["runtimeHandlers"] = [{"name": ""}, {"name": "runc"}]  # kubelet's copy, before the fix
    objects = [reported, node("n1", 20), configmap(5)]
    stale = audit(runtime(["runc", "nvidia"], ["runc", "nvidia"]), objects, TS, kubelet_node="n0")
    assert stale["handlers"]["runtime_handlers"] == ["", "runc"]
    assert kinds(stale) == [("loaded-disagrees-with-api", "n0")]
    assert "reports (default),runc loaded" in stale["gaps"][0]["detail"]
    reported["status"]["runtimeHandlers"].append({"name": "nvidia"})
    assert audit(runtime(["runc", "nvidia"], ["runc", "nvidia"]), objects, TS, kubelet_node="n0")["gaps"] == []
    # containerd 1.x reports no handlers: only CRI judges; the seed's lab (no kubelet node) has no such key
    del reported["status"]["runtimeHandlers"]
    assert audit(runtime(["runc"], ["runc"]), objects, TS, kubelet_node="n0")["handlers"]["runtime_handlers"] is None
    assert "runtime_handlers" not in audit(runtime(["runc"], ["runc"]), objects, TS)["handlers"]
