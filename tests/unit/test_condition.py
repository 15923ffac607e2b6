"""The node agent's condition (gpuop/judgment/condition.py), in node-problem-detector's contract."""

from datetime import UTC, datetime, timedelta

from gpuop.judgment.condition import (
    MESSAGE_MAX,
    NEXT_START,
    PROBLEM,
    RESTART_UNSAFE,
    condition_type,
    conditions_of,
    next_condition,
    reason_of,
)

T0 = datetime(2026, 12, 4, 22, 0, 0, tzinfo=UTC)


def gap(kind: str, detail: str = "said") -> dict:
    return {"kind": kind, "subject": "s", "views": ["loaded"], "detail": detail}


def problem_of(entry, unread=""):
    return conditions_of(entry, unread)[0]


def test_each_condition_is_true_with_its_own_gaps_the_worst_as_reason_none_is_false_an_unread_node_unknown():
    assert reason_of("restart-refuses-start") == "RestartRefusesStart"
    entry = {
        "loaded_from": "cri",
        "gaps": [gap("handler-not-loaded", "a"), gap("restart-takes-cri-down", "b"), gap("sandbox-fails", "c")],
    }
    assert conditions_of(entry, "") == [
        {
            "type": PROBLEM,
            "status": "True",
            "reason": "SandboxFails",
            "message": "[sandbox-fails] c [handler-not-loaded] a",
        },
        {
            "type": RESTART_UNSAFE,
            "status": "True",
            "reason": "RestartTakesCriDown",
            "message": "[restart-takes-cri-down] b",
        },
    ]
    healthy = conditions_of({"loaded_from": "cri", "gaps": []}, "")
    assert [(c["type"], c["status"], c["reason"]) for c in healthy] == [
        (PROBLEM, "False", "NoGap"),
        (RESTART_UNSAFE, "False", "NoGap"),
    ]
    assert conditions_of(None, "crictl did not answer within 10s") == [
        {
            "type": kind,
            "status": "Unknown",
            "reason": "NodeNotRead",
            "message": "the node's runtime was not read: crictl did not answer within 10s",
        }
        for kind in (PROBLEM, RESTART_UNSAFE)
    ]
    long = problem_of({"loaded_from": "cri", "gaps": [gap("sandbox-fails", "x" * 5000)]})["message"]
    assert len(long) == MESSAGE_MAX and long.endswith("...")


def test_the_seed_s_three_nodes_each_with_its_two_conditions():
    """The incident on 2.4 (written after the start, a restart loads it): a problem now, a safe
    restart; a version-4 drop-in beside a 2.3 root that runs fine: no problem now, its restart
    refused; the seed's lab node on 1.6.20: both."""
    statuses = lambda gaps: [c["status"] for c in conditions_of({"loaded_from": "cri", "gaps": gaps}, "")]  # noqa: E731
    assert statuses([gap("handler-not-loaded")]) == ["True", "False"]
    assert statuses([gap("restart-refuses-start")]) == ["False", "True"]
    assert statuses([gap("handler-not-loaded"), gap("restart-takes-cri-down")]) == ["True", "True"]


def test_a_runtime_not_answering_is_unknown_now_and_true_for_its_restart_only_where_its_files_say_so():
    down = conditions_of({"loaded_from": "cri-down", "gaps": [gap("cri-down", "its CRI does not answer")]}, "")
    assert [(c["status"], c["reason"]) for c in down] == [
        ("Unknown", "RuntimeNotAnswering"),
        ("Unknown", "RuntimeNotAnswering"),
    ]
    assert down[0]["message"] == (
        "the runtime's own answer was not had (loaded from cri-down): [cri-down] its CRI does not answer"
    )
    refused = conditions_of({"loaded_from": "cri-down", "gaps": [gap("restart-refuses-start", "v4")]}, "")
    assert [c["status"] for c in refused] == ["Unknown", "True"]


def test_every_gap_kind_sets_exactly_one_condition_as_the_glossary_s_table_says():
    """The glossary's gap kinds, each with its condition: the same split as the code's."""
    import os
    import re

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "glossary.md")) as f:
        rows = re.findall(r"^\| `([a-z-]+)` \| [^|]+ \| `(GPURuntime\w+)` \|", f.read(), re.M)
    assert len(rows) >= 25, rows
    assert {kind for kind, c in rows if c == "GPURuntimeRestartUnsafe"} == set(NEXT_START)
    for kind, c in rows:
        assert condition_type(kind) == f"gpuop.io/{c}", kind


def test_the_transition_time_moves_only_with_the_status_and_the_condition_is_refreshed_every_heartbeat():
    true = problem_of({"loaded_from": "cri", "gaps": [gap("handler-not-loaded", "a")]})
    first, why = next_condition(None, true, T0)
    assert why == "changed" and first["lastTransitionTime"] == first["lastHeartbeatTime"] == "2026-12-04T22:00:00Z"
    same, why = next_condition(first, true, T0 + timedelta(seconds=60))
    assert why == "" and same == first
    beat, why = next_condition(first, true, T0 + timedelta(seconds=300))
    assert why == "refreshed" and beat["lastTransitionTime"] == "2026-12-04T22:00:00Z"
    assert beat["lastHeartbeatTime"] == "2026-12-04T22:05:00Z"
    other = problem_of(
        {"loaded_from": "cri", "gaps": [gap("sandbox-fails", "b")]}
    )  # still True: the reason moves, not the transition
    moved, why = next_condition(beat, other, T0 + timedelta(seconds=310))
    assert (
        why == "changed" and moved["reason"] == "SandboxFails" and moved["lastTransitionTime"] == "2026-12-04T22:00:00Z"
    )
    # a new message alone is not written at once: it rides the next heartbeat
    worded = {**other, "message": "[sandbox-fails] c"}
    kept, why = next_condition(moved, worded, T0 + timedelta(seconds=315))
    assert why == "" and kept == moved
    rode, why = next_condition(moved, worded, T0 + timedelta(seconds=310 + 300))
    assert why == "refreshed" and rode["message"] == "[sandbox-fails] c"
    assert rode["lastTransitionTime"] == "2026-12-04T22:00:00Z"
    healthy, why = next_condition(moved, problem_of({"loaded_from": "cri", "gaps": []}), T0 + timedelta(seconds=320))
    assert why == "changed" and healthy["lastTransitionTime"] == "2026-12-04T22:05:20Z"


def test_a_heartbeat_in_the_future_is_written_again_and_read_as_stale():
    """A heartbeat stamped ahead of the clock (another writer, a clock set back) would stop the
    refreshes until the clock passed it: the agent writes it again at once; the fleet reads a
    condition stamped more than SKEW_S ahead of its own clock as stale, not fresh."""
    from gpuop.judgment.condition import SKEW_S, agents_report

    true = problem_of({"loaded_from": "cri", "gaps": [gap("handler-not-loaded", "a")]})
    first, _ = next_condition(None, true, T0)
    ahead = {**first, "lastHeartbeatTime": "2026-12-05T22:00:00Z"}  # a day ahead
    again, why = next_condition(ahead, true, T0 + timedelta(seconds=60))
    assert why == "refreshed" and again["lastHeartbeatTime"] == "2026-12-04T22:01:00Z"
    assert again["lastTransitionTime"] == first["lastTransitionTime"]
    node = {"metadata": {"name": "gpu-a"}, "status": {"conditions": [ahead]}}
    found = agents_report([node], T0)
    assert found["nodes"]["gpu-a"]["agent"] == "stale"
    assert found["unread"] == ["gpu-a (agent stale, its last heartbeat 86400s in the future)"]
    skewed = {**first, "lastHeartbeatTime": (T0 + timedelta(seconds=SKEW_S)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert agents_report([{**node, "status": {"conditions": [skewed]}}], T0)["nodes"]["gpu-a"]["agent"] == "ok"


def test_the_fleet_reads_each_agent_from_its_conditions_alone():
    from gpuop.judgment.condition import agent_verdict, said_gaps

    problem, restart = conditions_of(
        {
            "loaded_from": "cri",
            "gaps": [
                gap("handler-not-loaded", "a [b] c"),
                gap("sandbox-fails", "d"),
                gap("restart-refuses-start", "e"),
            ],
        },
        "",
    )
    assert said_gaps(problem) == [
        {"kind": "sandbox-fails", "detail": "d"},
        {"kind": "handler-not-loaded", "detail": "a [b] c"},
    ]
    written = [next_condition(None, c, T0)[0] for c in (problem, restart)]
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"}, *written]}}
    assert agent_verdict(node, T0 + timedelta(seconds=30)) == {
        "agent": "ok",
        "status": "True",
        "reason": "SandboxFails",
        "heartbeat_age_s": 30,
        "gaps": [
            {"kind": "sandbox-fails", "detail": "d", "condition": "GPURuntimeProblem"},
            {"kind": "handler-not-loaded", "detail": "a [b] c", "condition": "GPURuntimeProblem"},
            {"kind": "restart-refuses-start", "detail": "e", "condition": "GPURuntimeRestartUnsafe"},
        ],
        "conditions": {
            "GPURuntimeProblem": {"status": "True", "reason": "SandboxFails"},
            "GPURuntimeRestartUnsafe": {"status": "True", "reason": "RestartRefusesStart"},
        },
    }
    assert agent_verdict(node, T0 + timedelta(seconds=601))["agent"] == "stale"
    assert agent_verdict({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, T0)["agent"] == "missing"
    # fine now, its next start refused: the node is not healthy, by its restart's condition
    fine, refused = conditions_of({"loaded_from": "cri", "gaps": [gap("restart-refuses-start", "e")]}, "")
    node = {"status": {"conditions": [next_condition(None, c, T0)[0] for c in (fine, refused)]}}
    verdict = agent_verdict(node, T0)
    assert (verdict["status"], verdict["reason"]) == ("True", "RestartRefusesStart")
    assert verdict["conditions"]["GPURuntimeProblem"]["status"] == "False"


def test_the_fleet_from_its_agents_holds_every_gpu_node_and_names_those_unread():
    from gpuop.judgment.condition import agents_report

    written, _ = next_condition(None, problem_of({"loaded_from": "cri", "gaps": []}), T0)
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

    gap_found = problem_of({"loaded_from": "cri", "gaps": [gap("sandbox-fails")]})
    ready = {"type": "Ready", "status": "True"}
    nodes = [
        {
            "metadata": {"name": name},
            "status": {"conditions": [ready] + ([next_condition(None, c, T0)[0]] if c else [])},
        }
        for name, c in (
            ("gpu-a", gap_found),
            ("gpu-b", problem_of({"loaded_from": "cri", "gaps": []})),
            ("gpu-c", None),
            ("gpu-e", problem_of({"loaded_from": "cri", "gaps": [gap("driver-library-mismatch", "570 and 580")]})),
        )
    ]
    hosts = [
        ("gpu-a", {"node_name": "gpu-a"}),
        ("10.0.0.2", {"node_name": "gpu-b"}),
        ("@kubenode/gpu-c", {"node_name": "gpu-c"}),
        ("gpu-d", {}),
        ("gpu-e", {}),
    ]
    kept, left = flagged_by_agents(hosts, agents_report(nodes, T0 + timedelta(seconds=10)))
    assert kept == [("gpu-a", {"node_name": "gpu-a"})]
    assert left == [
        "10.0.0.2: its agent says False (NoGap)",
        "@kubenode/gpu-c: no GPU Node named gpu-c carries the agent's condition (its node_name?)",
        "gpu-d: no GPU Node named gpu-d carries the agent's condition (its node_name?)",
        "gpu-e: its agent's gaps are the NVIDIA driver's, which the repair does not change: "
        "[driver-library-mismatch] 570 and 580",
    ]
