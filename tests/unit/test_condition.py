"""The node agent's condition (gpuop/judgment/condition.py), in node-problem-detector's contract."""

from datetime import UTC, datetime, timedelta

from gpuop.judgment.condition import CONDITION, MESSAGE_MAX, condition_of, next_condition, reason_of

T0 = datetime(2026, 12, 4, 22, 0, 0, tzinfo=UTC)


def gap(kind: str, detail: str = "said") -> dict:
    return {"kind": kind, "subject": "s", "views": ["loaded"], "detail": detail}


def test_a_gap_is_true_with_the_worst_kind_as_reason_none_is_false_and_an_unread_node_unknown():
    assert reason_of("restart-refuses-start") == "RestartRefusesStart"
    found = condition_of(
        {"loaded_from": "cri", "gaps": [gap("handler-not-loaded", "a"), gap("restart-takes-cri-down", "b")]}, ""
    )
    assert found == {
        "type": CONDITION,
        "status": "True",
        "reason": "RestartTakesCriDown",
        "message": "[restart-takes-cri-down] b [handler-not-loaded] a",
    }
    assert condition_of({"loaded_from": "cri", "gaps": []}, "") == {
        "type": CONDITION,
        "status": "False",
        "reason": "NoGap",
        "message": "the runtime loads what is written, and a restart would load it too",
    }
    assert condition_of(None, "crictl did not answer within 10s") == {
        "type": CONDITION,
        "status": "Unknown",
        "reason": "NodeNotRead",
        "message": "the node's runtime was not read: crictl did not answer within 10s",
    }
    down = condition_of({"loaded_from": "cri-down", "gaps": [gap("cri-down", "its CRI does not answer")]}, "")
    assert (down["status"], down["reason"]) == ("Unknown", "RuntimeNotAnswering")
    assert (
        down["message"]
        == "the runtime's own answer was not had (loaded from cri-down): [cri-down] its CRI does not answer"
    )
    long = condition_of({"loaded_from": "cri", "gaps": [gap("sandbox-fails", "x" * 5000)]}, "")["message"]
    assert len(long) == MESSAGE_MAX and long.endswith("...")


def test_the_transition_time_moves_only_with_the_status_and_an_unchanged_condition_is_refreshed_every_5_minutes():
    true = condition_of({"loaded_from": "cri", "gaps": [gap("handler-not-loaded", "a")]}, "")
    first, why = next_condition(None, true, T0)
    assert why == "changed" and first["lastTransitionTime"] == first["lastHeartbeatTime"] == "2026-12-04T22:00:00Z"
    same, why = next_condition(first, true, T0 + timedelta(seconds=60))
    assert why == "" and same == first
    beat, why = next_condition(first, true, T0 + timedelta(seconds=300))
    assert why == "refreshed" and beat["lastTransitionTime"] == "2026-12-04T22:00:00Z"
    assert beat["lastHeartbeatTime"] == "2026-12-04T22:05:00Z"
    other = condition_of(
        {"loaded_from": "cri", "gaps": [gap("sandbox-fails", "b")]}, ""
    )  # still True: the reason moves, not the transition
    moved, why = next_condition(beat, other, T0 + timedelta(seconds=310))
    assert (
        why == "changed" and moved["reason"] == "SandboxFails" and moved["lastTransitionTime"] == "2026-12-04T22:00:00Z"
    )
    worded = {**other, "message": "[sandbox-fails] c"}
    same_reason, why = next_condition(moved, worded, T0 + timedelta(seconds=315))
    assert why == "updated" and same_reason["message"] == "[sandbox-fails] c"
    healthy, why = next_condition(
        moved, condition_of({"loaded_from": "cri", "gaps": []}, ""), T0 + timedelta(seconds=320)
    )
    assert why == "changed" and healthy["lastTransitionTime"] == "2026-12-04T22:05:20Z"


def test_the_fleet_reads_each_agent_from_its_condition_alone():
    from gpuop.judgment.condition import agent_verdict, said_gaps

    true = condition_of(
        {"loaded_from": "cri", "gaps": [gap("handler-not-loaded", "a [b] c"), gap("sandbox-fails", "d")]}, ""
    )
    assert said_gaps(true) == [
        {"kind": "sandbox-fails", "detail": "d"},
        {"kind": "handler-not-loaded", "detail": "a [b] c"},
    ]
    written, _ = next_condition(None, true, T0)
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"}, written]}}
    assert agent_verdict(node, T0 + timedelta(seconds=30)) == {
        "agent": "ok",
        "status": "True",
        "reason": "SandboxFails",
        "heartbeat_age_s": 30,
        "gaps": [{"kind": "sandbox-fails", "detail": "d"}, {"kind": "handler-not-loaded", "detail": "a [b] c"}],
    }
    assert agent_verdict(node, T0 + timedelta(seconds=601))["agent"] == "stale"
    assert agent_verdict({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, T0)["agent"] == "missing"


def test_the_fleet_from_its_agents_holds_every_gpu_node_and_names_those_unread():
    from gpuop.judgment.condition import agents_report

    written, _ = next_condition(None, condition_of({"loaded_from": "cri", "gaps": []}, ""), T0)
    node = lambda name, conditions, gpus=None: {  # noqa: E731
        "metadata": {"name": name},
        "status": {"conditions": conditions, **({"allocatable": {"nvidia.com/gpu": gpus}} if gpus else {})},
    }
    ready = {"type": "Ready", "status": "True"}
    found = agents_report(
        [
            node("gpu-a", [ready, written]),
            node("gpu-b", [ready], "8"),
            node("cpu-c", [ready]),
            node("gpu-d", [ready, written], "8"),
        ],
        T0 + timedelta(seconds=700),
    )
    assert list(found["nodes"]) == [
        "gpu-a",
        "gpu-b",
        "gpu-d",
    ]  # a Node with neither GPUs nor the condition is no GPU node
    assert found["unread"] == [
        "gpu-a (agent stale, its last heartbeat 700s ago)",
        "gpu-b (agent missing)",
        "gpu-d (agent stale, its last heartbeat 700s ago)",
    ]


def test_a_fleet_run_takes_from_the_agents_only_the_nodes_whose_condition_is_true():
    from gpuop.judgment.condition import agents_report
    from gpuop.reach.nodes_file import flagged_by_agents

    gap_found = condition_of({"loaded_from": "cri", "gaps": [gap("sandbox-fails")]}, "")
    ready = {"type": "Ready", "status": "True"}
    nodes = [
        {
            "metadata": {"name": name},
            "status": {"conditions": [ready] + ([next_condition(None, c, T0)[0]] if c else [])},
        }
        for name, c in (
            ("gpu-a", gap_found),
            ("gpu-b", condition_of({"loaded_from": "cri", "gaps": []}, "")),
            ("gpu-c", None),
        )
    ]
    hosts = [
        ("gpu-a", {"node_name": "gpu-a"}),
        ("10.0.0.2", {"node_name": "gpu-b"}),
        ("@kubenode/gpu-c", {"node_name": "gpu-c"}),
        ("gpu-d", {}),
    ]
    kept, left = flagged_by_agents(hosts, agents_report(nodes, T0 + timedelta(seconds=10)))
    assert kept == [("gpu-a", {"node_name": "gpu-a"})]
    assert left == [
        "10.0.0.2: its agent says False (NoGap)",
        "@kubenode/gpu-c: no GPU Node named gpu-c carries the agent's condition (its node_name?)",
        "gpu-d: no GPU Node named gpu-d carries the agent's condition (its node_name?)",
    ]
