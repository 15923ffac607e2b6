"""The one door to the judgment (``gpuop.judgment.rules.judge``): every caller asks it, so one planted
state gives one verdict in the lab audit, the node audit, the repair's plan and its audit after; a
view left unread is named and the rest judged. The cluster's own rules: test_cluster_rules.py."""

import ast
import pathlib

import runbook.audit.node_audit
import runbook.repair.rollout
from gpuop.judgment import lab_audit as audit
from gpuop.judgment import rules
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
