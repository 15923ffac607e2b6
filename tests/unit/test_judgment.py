"""The one door to the judgment (``gpuop.judgment.rules.judge``): every caller asks it, so one planted
state gives one verdict in the lab audit, the node audit, the repair's plan and its audit after;
the cluster's own rules (``cluster_gaps``) judge a fleet as the lab's audit judges the lab."""

import ast
import pathlib

import runbook.audit.node_audit
import runbook.repair.rollout
from gpuop.judgment import cluster_rules, rules
from gpuop.judgment import lab_audit as audit
from tests.helpers.crioreads import no_sandbox, node, pod, rc, refused_event, reloaded_view
from tests.helpers.plans import plan_of

ROOT = pathlib.Path(__file__).resolve().parents[2]


def reloaded_node() -> tuple:
    """CRI-O after a SIGHUP (its status names nvidia, its sandboxes refuse it), a Pod of
    RuntimeClass nvidia on it and the kubelet's refusal said after the daemon started."""
    objects = [
        node("gpu-a"),
        rc("nvidia"),
        no_sandbox(pod("job", "gpu-a", runtime_class="nvidia")),
        refused_event("job", "2026-12-04T04:05:00Z"),
    ]
    return reloaded_view(), objects


def test_the_lab_audit_the_node_audit_the_plan_and_the_audit_after_give_one_verdict():
    view, objects = reloaded_node()
    judged = rules.judge(view, objects, "gpu-a")  # the node audit's and the repair's audit after's own call
    assert [(g["kind"], g["subject"]) for g in judged["gaps"]] == [("sandbox-refuses-loaded", "ml/job")]
    lab = audit.audit(
        view,
        objects,
        {"node": "none", "physical_gpus": 1, "vram_per_gpu_gib": 1, "configmap": "a/b"},
        kubelet_node="gpu-a",
    )
    assert [(g["kind"], g["subject"]) for g in lab["gaps"]] == [("sandbox-refuses-loaded", "ml/job")]
    assert lab["gaps"][0] == judged["gaps"][0]
    r = {
        "hostname": "gpu-a",
        "containerds": [],
        "kubelet": None,
        "crios": [{**view["daemon"], "serves": True, "files": {}}],
    }
    plan = plan_of("gpu-a", r, view, objects, "nvidia")
    assert plan["why"].endswith("the running daemon's status names it, its sandboxes refuse it (ml/job)")
    # the same state with no gap given: the plan finds no refusal of its own
    blind = runbook.repair.rollout.plan_node("gpu-a", r, view, [], objects, "nvidia")
    assert blind["action"] == "none"


def test_every_caller_goes_through_the_one_door():
    assert runbook.audit.node_audit.judge is rules.judge and runbook.repair.rollout.judge is rules.judge
    assert audit.judge is rules.judge
    # ``findings`` and ``node_entry`` are called by ``judge`` alone
    callers = set()
    for path in [*ROOT.glob("gpuop/**/*.py"), *ROOT.glob("runbook/**/*.py"), *ROOT.glob("*.py")]:
        for call in ast.walk(ast.parse(path.read_text())):
            if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", "")) in (
                "findings",
                "node_entry",
            ):
                callers.add(path.relative_to(ROOT).as_posix())
    assert callers == {"gpuop/judgment/rules.py"}


def toolkit_rollout(updated: int) -> list:
    """The toolkit's DaemonSet on gpu-a and gpu-b, ``updated`` of them on its new spec; where one
    is not, its old Pod Ready on gpu-a and its new Pod, meant for gpu-b, refused by the scheduler
    for memory (the seed's step 8)."""
    owner = [{"kind": "DaemonSet", "uid": "u1", "name": "nvidia-container-toolkit"}]

    def toolkit_pod(name: str, generation: str, status: dict, node: str) -> dict:
        """Bound to ``node`` where it runs; else meant for it, as the DaemonSet controller does."""
        meant = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                }
            }
        }
        return {
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "gpu-operator",
                "ownerReferences": owner,
                "labels": {"pod-template-generation": generation},
            },
            "spec": {
                "containers": [],
                "affinity": meant,
                **({"nodeName": node} if status["phase"] == "Running" else {}),
            },
            "status": status,
        }

    ds = {
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-container-toolkit", "namespace": "gpu-operator", "generation": 2, "uid": "u1"},
        "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}},
        "status": {
            "observedGeneration": 2,
            "desiredNumberScheduled": 2,
            "updatedNumberScheduled": updated,
            "numberReady": updated,
            "numberAvailable": updated,
            "numberUnavailable": 2 - updated,
        },
    }
    running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    if updated == 2:
        return [ds, toolkit_pod("toolkit-a", "2", running, "gpu-a"), toolkit_pod("toolkit-b", "2", running, "gpu-b")]
    refused = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node "
                "affinity/selector.",
            }
        ],
    }
    return [ds, toolkit_pod("toolkit-old", "1", running, "gpu-a"), toolkit_pod("toolkit-new", "2", refused, "gpu-b")]


def test_a_stalled_toolkit_rollout_is_a_gap_of_the_fleet_as_of_the_lab():
    ds, *pods = objects = toolkit_rollout(1)
    assert cluster_rules.cluster_gaps({"gpu-a": {"loaded": ["runc"]}}, objects) == [
        {
            "kind": "rollout-stalled",
            "subject": "gpu-operator/nvidia-container-toolkit",
            "views": ["scheduled"],
            "detail": "DaemonSet gpu-operator/nvidia-container-toolkit: rollout stalled at 1/2 updated, blocker "
            "insufficient-memory",
        }
    ]
    lab = audit.audit(
        reloaded_view(), objects, {"node": "none", "physical_gpus": 1, "vram_per_gpu_gib": 1, "configmap": "a/b"}
    )
    assert [g for g in lab["gaps"] if g["kind"] == "rollout-stalled"] == cluster_rules.cluster_gaps(
        {"gpu-b": {"loaded": []}}, objects
    )
    assert cluster_rules.cluster_gaps({"gpu-a": {"loaded": []}}, toolkit_rollout(2)) == []
    assert cluster_rules.cluster_gaps({"gpu-z": {"loaded": []}}, objects) == []  # a rollout on no node of the fleet


def test_the_agent_reach_names_the_stalled_rollout_as_every_reach_does_without_a_handler_rule():
    """The agent reach (no runtime's view: its agents say no handler) asks the fleet's objects' own
    rules alone: the same stalled rollout as the other reaches, and no RuntimeClass judged."""
    objects = [{"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}, *toolkit_rollout(1)]
    every = cluster_rules.cluster_gaps({"gpu-a": {"loaded": ["runc"]}}, objects)
    assert [g["kind"] for g in every] == ["runtimeclass-handler-nowhere", "rollout-stalled"]
    assert cluster_rules.fleet_object_gaps(["gpu-a"], objects) == every[1:]
    assert cluster_rules.fleet_object_gaps(["gpu-b"], objects) == every[1:]  # the Pod meant for gpu-b
    assert cluster_rules.fleet_object_gaps(["gpu-z"], objects) == []
    assert cluster_rules.fleet_object_gaps(["gpu-a"], toolkit_rollout(2)) == []


def test_a_crictl_that_hangs_leaves_the_loaded_view_unread_named_and_the_rest_judged():
    from gpuop.judgment.view import node_view
    from gpuop.reach.shell import cri_answer
    from tests.helpers.nodereads import RC, daemon, node, pod, read

    hung = cri_answer(["", "124"])
    assert (hung["cri"], hung["error"]) == ("unanswered", "crictl did not answer within 10s")
    assert cri_answer(["rpc error: code = DeadlineExceeded desc = context deadline exceeded", "1"])["cri"] == "down"
    d = {**daemon(after=("runc",), cri_ok=False), "loaded": hung}  # the files judged: a restart takes CRI down
    view = node_view(read(d))
    assert view["loaded_from"] == "crictl-hung"
    entry = rules.judge(view, [RC, node(), pod("train")], "gpu-a")
    assert [g["kind"] for g in entry["gaps"]] == ["restart-takes-cri-down", "view-unread"]
    assert entry["gaps"][1]["detail"] == (
        "what containerd 1.6.20 holds was not read: crictl did not answer within 10s (crictl itself hung, past its "
        "own 3 s deadline): nothing is judged against the loaded view, the rest is"
    )
