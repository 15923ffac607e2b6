"""The cluster's own rules (``gpuop.judgment.cluster_rules``): a stalled toolkit rollout is a gap of
the fleet as of the lab, named by every reach (the agent reach asking the fleet's objects' rules
alone)."""

from gpuop.judgment import cluster_rules
from gpuop.judgment import lab_audit as audit
from tests.helpers.crioreads import reloaded_view


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
    stalled = {
        "kind": "rollout-stalled",
        "subject": "gpu-operator/nvidia-container-toolkit",
        "views": ["scheduled"],
        "detail": "DaemonSet gpu-operator/nvidia-container-toolkit: rollout stalled at 1/2 updated, blocker "
        "insufficient-memory",
    }
    assert cluster_rules.fleet_object_gaps(["gpu-a"], objects) == [stalled] == every[1:]
    assert cluster_rules.fleet_object_gaps(["gpu-b"], objects) == [stalled]  # the Pod meant for gpu-b
    assert cluster_rules.fleet_object_gaps(["gpu-z"], objects) == []
    assert cluster_rules.fleet_object_gaps(["gpu-a"], toolkit_rollout(2)) == []
