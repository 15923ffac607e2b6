"""Scheduler messages as Kubernetes 1.36 writes them, and what the reports make of them."""

from gpuop.judgment.scheduling import blocker, reasons, slug, unschedulable

GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)
MEMORY = (
    "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't satisfy plugin(s) "
    "[NodeAffinity]. no new claims to deallocate, preemption: 0/3 nodes are available: "
    "3 Preemption is not helpful for scheduling."
)
OLDER = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)


def test_reasons_stop_before_the_notes():
    assert reasons(GPU) == [(3, "Insufficient nvidia.com/gpu")]
    assert reasons(OLDER) == [(3, "Insufficient nvidia.com/gpu")]
    assert reasons(MEMORY) == [(1, "Insufficient memory"), (2, "node(s) didn't satisfy plugin(s) [NodeAffinity]")]


def test_blocker_prefers_the_missing_resource():
    assert blocker(MEMORY) == "insufficient-memory"
    assert blocker(GPU) == "insufficient-nvidia-com-gpu"
    assert blocker("0/3 nodes are available: 3 node(s) had untolerated taint {x: y}.") == (
        "node-s-had-untolerated-taint-x-y"
    )
    assert blocker("") == "unschedulable"


def test_slug():
    assert slug("Insufficient memory") == "insufficient-memory"


def test_unschedulable_reads_the_condition():
    pending = {
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": GPU}]
        }
    }
    bound = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    assert unschedulable(pending)
    assert not unschedulable(bound)
    assert not unschedulable({"status": {}})
