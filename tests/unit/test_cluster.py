"""Rollout and node readings on objects shaped like kubectl's JSON."""

from datetime import UTC

from gpuop.judgment.cluster import allocatable_count, node_gpu_lines, rollout_complete, rollout_settled, rollout_status
from tests.helpers import objects

MEMORY = (
    "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. preemption: 0/3 nodes are available: 3 Preemption is not helpful."
)


node = objects.node


def test_node_gpu_table_in_lab_order_with_zero_for_none():
    nodes = [node("b", 20), node("a", 4), node("c", None)]
    assert node_gpu_lines(nodes, ["a", "b", "c"]) == ["NAME GPU", "a 4", "b 20", "c 0"]
    assert allocatable_count(node("x", None)) == 0


def ds(generation, image, status, max_unavailable=1):
    return {
        "metadata": {"name": "t", "uid": "ds-uid", "generation": generation},
        "spec": {
            "updateStrategy": {"rollingUpdate": {"maxUnavailable": max_unavailable}},
            "template": {"spec": {"containers": [{"image": image}]}},
        },
        "status": status,
    }


def pod(name, generation, image, ready=True, unschedulable_message="", terminating=False):
    """A Pod of DaemonSet ``ds-uid``, made from its template ``generation``, bound to no node."""
    return objects.pod(
        name,
        None,
        ready=ready,
        owner_uid="ds-uid",
        pending_message=unschedulable_message,
        image=image,
        template_generation=generation,
        terminating=terminating,
    )


STALL_STATUS = {
    "observedGeneration": 2,
    "desiredNumberScheduled": 3,
    "updatedNumberScheduled": 1,
    "numberReady": 2,
    "numberAvailable": 2,
    "numberUnavailable": 1,
}
STALL_PODS = [
    pod("a", 1, "tk:v1.16.2"),
    pod("b", 1, "tk:v1.16.2"),
    pod("c", 2, "tk:v1.17.0", ready=False, unschedulable_message=MEMORY),
    pod("gone", 1, "tk:v1.16.2", terminating=True),
    {**pod("stranger", 1, "other"), "metadata": {"name": "s", "labels": {}}},
]


def test_stalled_rollout_is_reported_from_status_and_pods():
    stalled = ds(2, "tk:v1.17.0", STALL_STATUS)
    assert rollout_status(stalled, STALL_PODS) == {
        "DESIRED": 3,
        "UPDATED": 1,
        "READY": 2,
        "OLD_IMAGE_PODS": 2,
        "MAX_UNAVAILABLE": 1,
        "BLOCKER": "insufficient-memory",
    }
    assert rollout_settled(stalled, STALL_PODS)
    assert not rollout_complete(stalled)


def test_a_change_outside_the_template_leaves_the_stall_a_stall():
    # maxUnavailable edited after the upgrade: the generation moves on, the template's does not.
    edited = ds(3, "tk:v1.17.0", {**STALL_STATUS, "observedGeneration": 3})
    edited["metadata"]["annotations"] = {"deprecated.daemonset.template.generation": "2"}
    assert rollout_settled(edited, STALL_PODS)
    assert rollout_status(edited, STALL_PODS)["BLOCKER"] == "insufficient-memory"


def test_unobserved_generation_is_not_settled():
    assert not rollout_settled(ds(3, "tk:v1.18.0", STALL_STATUS), STALL_PODS)
    fresh = ds(1, "tk:v1.16.2", {})
    assert not rollout_complete(fresh) and not rollout_settled(fresh, [])


def test_completed_rollout_has_no_blocker():
    done = ds(
        2,
        "tk:v1.17.0",
        {
            "observedGeneration": 2,
            "desiredNumberScheduled": 3,
            "updatedNumberScheduled": 3,
            "numberReady": 3,
            "numberAvailable": 3,
        },
    )
    pods = [pod(n, 2, "tk:v1.17.0") for n in "abc"]
    assert rollout_complete(done) and rollout_settled(done, pods)
    assert rollout_status(done, pods)["BLOCKER"] == "none"
    assert rollout_status(done, pods)["OLD_IMAGE_PODS"] == 0


def test_rollout_in_progress_is_not_settled():
    moving = ds(2, "tk:v1.17.0", {**STALL_STATUS, "numberUnavailable": 1})
    pods = [pod("a", 1, "tk:v1.16.2"), pod("b", 1, "tk:v1.16.2"), pod("c", 2, "tk:v1.17.0", ready=False)]
    assert not rollout_settled(moving, pods)


def test_nodes_too_small_for_a_memory_request():
    from gpuop.judgment.cluster import nodes_too_small

    def mem(name, memory):
        return {"metadata": {"name": name}, "status": {"allocatable": {"memory": memory}}}

    nodes = [mem("a", "32Gi"), mem("b", "64Gi"), mem("c", "33554432Ki")]
    assert nodes_too_small(nodes, ["a", "b", "c"], "256Mi") == []
    assert nodes_too_small(nodes, ["a", "b", "c"], "32Gi") == []
    assert nodes_too_small(nodes, ["a", "b", "c"], "64Gi") == [("a", "32Gi"), ("c", "33554432Ki")]
    assert nodes_too_small(nodes, ["a", "missing"], "1Mi") == [("missing", "0")]


def test_stalled_components_are_named_by_the_leases_they_no_longer_renew():
    from datetime import datetime

    from gpuop.judgment.leases import stalled_components

    def lease(namespace, name, renewed, duration, holder="lab-host_0f3e"):
        spec = {
            "leaseDurationSeconds": duration,
            **({"renewTime": renewed} if renewed else {}),
            **({"holderIdentity": holder} if holder else {}),
        }
        return {"kind": "Lease", "metadata": {"namespace": namespace, "name": name}, "spec": spec}

    now = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
    fresh = [
        lease("kube-system", "kube-scheduler", "2026-12-01T08:59:55.123456Z", 15),
        lease("kube-system", "kube-controller-manager", "2026-12-01T08:59:58Z", 15),
        lease("kube-node-lease", "lab-node-0", "2026-12-01T08:59:59.5Z", 8),
    ]
    assert stalled_components(fresh, ["lab-node-0"], now) == []
    stale = [
        lease("kube-system", "kube-scheduler", "2026-12-01T08:59:08Z", 15),
        fresh[1],
        lease("kube-node-lease", "lab-node-0", None, 8),
    ]
    assert stalled_components(stale, ["lab-node-0", "lab-node-1"], now) == [
        "kube-scheduler: its leader lease kube-system/kube-scheduler was last renewed 52s ago (duration 15s)",
        "node lab-node-0's agent (kwok-controller, or its kubelet): the node lease kube-node-lease/lab-node-0 "
        "was last renewed never (duration 8s)",
        "node lab-node-1's agent (kwok-controller, or its kubelet): "
        "the node lease kube-node-lease/lab-node-1 is absent",
    ]
    # A renewal late by less than the grace is load, not a dead holder.
    late = [lease("kube-system", "kube-scheduler", "2026-12-01T08:59:41Z", 15), *fresh[1:]]
    assert stalled_components(late, ["lab-node-0"], now) == []
    # Once the lab healed a component, only a renewal after that moment counts (lab/lab.sh up).
    healed = datetime(2026, 12, 1, 8, 59, 57, tzinfo=UTC)
    assert stalled_components(fresh, [], now, since=healed) == [
        "kube-scheduler: its leader lease kube-system/kube-scheduler was last renewed 4.9s ago, before the "
        "cluster was healed 3.0s ago"
    ]
    # A scheduler that failed to renew gives its lease up on its way out (client-go's release: no
    # holder, a duration of 1 s, renewed the moment it gave up), then exits: fresh for 6 s to the
    # preflight, never held to the lab's own check (lab/lab.sh heal).
    released = [lease("kube-system", "kube-scheduler", "2026-12-01T08:59:58.5Z", 1, holder=""), *fresh[1:]]
    assert stalled_components(released, ["lab-node-0"], now) == []
    assert stalled_components(released, ["lab-node-0"], now, since=healed, held=True) == [
        "kube-scheduler: its leader lease kube-system/kube-scheduler was given up 1.5s ago (no holder)"
    ]
    assert stalled_components(fresh, ["lab-node-0"], now, held=True) == []


def test_a_node_takes_pods_once_ready_and_untainted():
    from gpuop.judgment.cluster import node_ready

    ready = {"type": "Ready", "status": "True"}
    down = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime is down"}
    taint = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    assert node_ready(None) == (False, "not registered")
    assert node_ready({"status": {}}) == (False, "no Ready condition yet")
    assert node_ready({"status": {"conditions": [ready]}}) == (True, "Ready True")
    assert node_ready({"status": {"conditions": [ready]}, "spec": {"taints": [taint]}}) == (
        False,
        "Ready True, taints node.kubernetes.io/not-ready",
    )
    assert node_ready({"status": {"conditions": [down]}}) == (
        False,
        "Ready False (KubeletNotReady: container runtime is down)",
    )


def test_the_sandbox_failure_is_this_pod_s_newest():
    from gpuop.judgment.cluster import sandbox_failure, sandbox_lines

    pod = {"metadata": {"name": "cuda-probe", "uid": "u2"}, "spec": {"nodeName": "lab-node-0"}}

    def event(uid, at, message, reason="FailedCreatePodSandBox"):
        return {
            "reason": reason,
            "message": message,
            "lastTimestamp": at,
            "metadata": {"creationTimestamp": at},
            "involvedObject": {"kind": "Pod", "name": "cuda-probe", "uid": uid},
        }

    events = [
        event("u1", "2026-12-01T10:00:09Z", "a deleted Pod's"),
        event("u2", "2026-12-01T10:00:01Z", "first"),
        event("u2", "2026-12-01T10:00:05Z", "newest"),
        event("u2", "2026-12-01T10:00:07Z", "x", "Scheduled"),
    ]
    assert sandbox_failure(events, pod)["message"] == "newest"
    assert sandbox_failure(events[:1], pod) is None
    assert sandbox_lines(pod, sandbox_failure(events, pod), "nvidia") == [
        "FailedCreatePodSandBox",
        "newest",
        "handler nvidia",
        "node lab-node-0",
    ]


def test_the_reboot_report_holds_the_node_against_the_forecast():
    from datetime import datetime

    from gpuop.judgment.cluster import reboot_lines, reported_since

    moment = datetime(2026, 12, 1, 15, 0, 0, 400000, tzinfo=UTC)

    def node(status, transition, beat, reason="KubeletReady", message="kubelet is posting ready status"):
        return {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": status,
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": transition,
                        "lastHeartbeatTime": beat,
                    }
                ]
            }
        }

    down = node("False", "2026-12-01T15:00:06Z", "2026-12-01T15:00:10Z", "KubeletNotReady", "container runtime is down")
    assert reported_since(down, moment) and not reported_since(node("True", "x", "2026-12-01T15:00:04Z"), moment)
    assert reboot_lines(False, down, moment) == [
        "REBOOT_AT=2026-12-01T15:00:00Z",
        "FORECAST_CRI=fails",
        "READY=False",
        "REASON=KubeletNotReady",
        "MESSAGE=container runtime is down",
        "CHANGED_AFTER_S=6",
        "MATCHES=yes",
    ]
    stayed = node("True", "2026-12-01T14:10:00Z", "2026-12-01T15:00:10Z")
    assert reboot_lines(True, stayed, moment)[5:] == ["CHANGED_AFTER_S=unchanged", "MATCHES=yes"]
    assert reboot_lines(False, stayed, moment)[-1] == "MATCHES=no"  # the forecast said CRI fails
