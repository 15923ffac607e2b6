"""A sandbox that fails (gpuop.judgment.sandbox): the runtime's refusal in its own words, and the
kubelet's word on it believed only from the Pod's own node, after the daemon started."""

from gpuop.judgment.rules import findings
from gpuop.judgment.sandbox import sandbox_refusal, says_sandbox_error
from tests.helpers.crioreads import (
    RELOADED_SAID,
    RUNP_SAID,
    crio_view,
    no_sandbox,
    node,
    pod,
    rc,
    refused_event,
    reloaded_view,
)
from tests.helpers.plans import plan_of


def test_the_sandbox_refusal_is_cri_os_own_and_matches_what_it_said():
    view = crio_view(loaded=["runc"])
    assert sandbox_refusal(view, "nvidia") == "failed to find runtime handler nvidia from runtime list map[runc:<ptr>]"
    assert says_sandbox_error("Failed to create pod sandbox: " + RUNP_SAID, sandbox_refusal(view, "nvidia"))
    assert not says_sandbox_error(
        "Failed to create pod sandbox: " + RUNP_SAID, sandbox_refusal(crio_view(loaded=["crun", "runc"]), "nvidia")
    )


def test_a_handler_its_status_names_and_its_sandboxes_refuse_is_named_and_a_restart_repairs_it():
    """What the lab's CRI-O 1.36.3 did after a reload: its status names nvidia, its sandboxes say
    it holds runc only. The kubelet's event, said after the daemon started, is the proof."""
    job = no_sandbox(pod("job", "gpu-a", runtime_class="nvidia"))
    objects = [node("gpu-a"), rc("nvidia"), job]
    events = [refused_event("job", "2026-12-04T04:05:00Z")]
    gaps = findings(reloaded_view(), objects, "gpu-a", events=events)
    assert [(g["kind"], g["subject"]) for g in gaps] == [("sandbox-refuses-loaded", "ml/job")]
    assert gaps[0]["detail"] == (
        "Pod ml/job (RuntimeClass nvidia, handler nvidia) cannot start a sandbox on gpu-a: cri-o 1.36.3's status "
        f"names nvidia, its sandboxes refuse it (the kubelet's newest event: {RELOADED_SAID}); a reload (SIGHUP) "
        "reaches CRI-O's status, not its sandboxes (cri-o#10202); a restart loads it"
    )
    # the repair plan: a restart alone
    r = {
        "hostname": "gpu-a",
        "containerds": [],
        "kubelet": None,
        "crios": [{**reloaded_view()["daemon"], "serves": True, "files": {}}],
    }
    plan = plan_of("gpu-a", r, reloaded_view(), [*objects, *events], "nvidia")
    assert (plan["action"], plan["restart"], plan["files"]) == ("repair", True, [])
    assert plan["why"].endswith("the running daemon's status names it, its sandboxes refuse it (ml/job)")


def test_a_refusal_said_before_the_daemon_started_or_to_a_pod_that_has_its_sandbox_is_no_gap():
    job = no_sandbox(pod("job", "gpu-a", runtime_class="nvidia"))
    before = [refused_event("job", "2026-12-04T04:03:00Z")]  # the daemon restarted since: not its word
    assert findings(reloaded_view(), [node("gpu-a"), rc("nvidia"), job], "gpu-a", events=before) == []
    after = [refused_event("job", "2026-12-04T04:05:00Z")]
    started = no_sandbox(pod("job", "gpu-a", runtime_class="nvidia"), there=True)  # the kubelet's retry worked
    assert findings(reloaded_view(), [node("gpu-a"), rc("nvidia"), started], "gpu-a", events=after) == []
    assert findings(reloaded_view(None), [node("gpu-a"), rc("nvidia"), job], "gpu-a", events=after) == []


def test_a_sandbox_failure_said_by_another_than_the_pod_s_node_s_kubelet_turns_nothing():
    """One agent's token could forge a FailedCreatePodSandBox Event about another node's Pod: the
    rule believes only the kubelet of the Pod's node (its source host, its reporting instance)."""
    job = no_sandbox(pod("job", "gpu-a", runtime_class="nvidia"))
    objects = [node("gpu-a"), rc("nvidia"), job]
    at = "2026-12-04T04:05:00Z"
    for forged in ({"component": "kubelet", "host": "gpu-b"}, {"component": "gpuop-agent", "host": "gpu-a"}):
        assert findings(reloaded_view(), objects, "gpu-a", events=[refused_event("job", at, forged)]) == [], forged
    other_instance = {**refused_event("job", at), "reportingInstance": "gpu-b"}
    assert findings(reloaded_view(), objects, "gpu-a", events=[other_instance]) == []
    kinds = [g["kind"] for g in findings(reloaded_view(), objects, "gpu-a", events=[refused_event("job", at)])]
    assert kinds == ["sandbox-refuses-loaded"]
