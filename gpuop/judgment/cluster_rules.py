"""The rules of the cluster around its runtimes: RuntimeClasses whose handler no judged runtime
loads, Nodes whose Pods hold more GPUs than they advertise, time-slicing's arithmetic, DaemonSet
rollouts stalled (the seed's step 8). ``cluster_gaps`` judges a fleet with them (``fleet_object_gaps``
alone for the agent reach), ``lab_host_gaps`` a lab host's cluster, in its report's order; both asked
through the one door, ``gpuop.judgment.rules.judge``, or beside it by the fleet's report."""

import jmespath

from gpuop.judgment.cluster import (
    active,
    allocatable_count,
    gpus_asked,
    owned_pods,
    rollout_complete,
    rollout_settled,
    rollout_status,
)
from gpuop.judgment.gaps import gap
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.slots import replicas_of


def gpus_held(name: str, pods: list) -> int:
    """The GPUs (``nvidia.com/gpu``) the active Pods bound to node ``name`` hold."""
    return sum(gpus_asked(p) for p in pods if p["spec"].get("nodeName") == name and active(p))


def overcommitted(node: dict, pods: list) -> dict | None:
    """The gap of a Node whose active Pods hold more GPUs than it advertises; None where they fit.

    overcommitted(node, pods) -> {"kind": "gpus-overcommitted", "subject": "gpu-a", ...}
    """
    name, advertised = node["metadata"]["name"], allocatable_count(node)
    asked = gpus_held(name, pods)
    if asked <= advertised:
        return None
    return gap(
        "gpus-overcommitted", name, ["scheduled"], f"node {name}: Pods hold {asked} GPUs, it advertises {advertised}"
    )


def unloaded_class(rc: dict, loaded: list, pods: list) -> dict | None:
    """The gap of a RuntimeClass whose handler the one runtime of a lab host does not load, naming
    the Pods of that class; None where it loads it. (On a fleet, ``cluster_gaps`` asks whether any
    judged runtime loads it.)

        unloaded_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"}, ["runc"], pods)
        -> {"kind": "runtimeclass-handler-not-loaded", "subject": "nvidia", ...}
    """
    if rc["handler"] in loaded:
        return None
    name = rc["metadata"]["name"]
    users = [ref(p) for p in pods if p["spec"].get("runtimeClassName") == name]
    return gap(
        "runtimeclass-handler-not-loaded",
        name,
        ["scheduled", "loaded"],
        f"RuntimeClass {name}: handler {rc['handler']} not loaded; its Pods fail as soon as they are "
        f"recreated: {', '.join(users) or 'none now'}",
    )


def time_slicing_gaps(node: dict, replicas: int, time_slicing: dict) -> tuple:
    """The time-sliced node's gap and warning: it advertising other than its physical GPUs times the
    replicas of its time-slicing ConfigMap (``time-slicing-mismatch``; none where it agrees), and its
    slots sharing each GPU's whole memory (``time-sliced-memory-shared``: by design, a warning).

    + time_slicing: {"physical_gpus", "vram_per_gpu_gib", "configmap": "ns/name"}

        time_slicing_gaps(node, 4, {"physical_gpus": 2, "vram_per_gpu_gib": 80, "configmap": "gpu/ts"})
        -> ([{"kind": "time-slicing-mismatch", ...}], [{"kind": "time-sliced-memory-shared", ...}])
    """
    name, advertised = node["metadata"]["name"], allocatable_count(node)
    expected = time_slicing["physical_gpus"] * replicas
    warning = gap(
        "time-sliced-memory-shared",
        name,
        ["scheduled"],
        f"node {name}: {replicas} time-sliced slots per GPU share the GPU's whole "
        f"{time_slicing['vram_per_gpu_gib']} GiB; a slot is guaranteed 0 GiB, with no memory or fault "
        "isolation (time-slicing's design, not a fault to repair)",
    )
    mismatch = (
        []
        if advertised == expected
        else [
            gap(
                "time-slicing-mismatch",
                name,
                ["written", "scheduled"],
                f"node {name} advertises {advertised} GPUs, but {time_slicing['configmap']} gives "
                f"{time_slicing['physical_gpus']} x {replicas} = {expected}",
            )
        ]
    )
    return mismatch, [warning]


def stalled_rollout(ds: dict, pods: list) -> dict | None:
    """The gap of a DaemonSet whose rollout went as far as it can and is not complete (an updated
    Pod no node takes); None where it is complete or still moving.

        stalled_rollout(toolkit, pods) -> {"kind": "rollout-stalled", "subject":
            "gpu-operator/nvidia-container-toolkit", ...}
    """
    if not rollout_settled(ds, pods) or rollout_complete(ds):
        return None
    status = rollout_status(ds, pods)
    return gap(
        "rollout-stalled",
        ref(ds),
        ["scheduled"],
        f"DaemonSet {ref(ds)}: rollout stalled at {status['UPDATED']}/"
        f"{status['DESIRED']} updated, blocker {status['BLOCKER']}",
    )


def node_of(pod: dict) -> str:
    """The node a Pod is bound to, or, unscheduled, the one node its DaemonSet meant it for (the
    controller's required affinity on ``metadata.name``); "" where neither.

        node_of({"spec": {"nodeName": "gpu-a"}}) -> "gpu-a"
    """
    meant = (
        jmespath.search(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[].matchFields[?key=='metadata.name'][].values[]",
            pod,
        )
        or []
    )
    return pod["spec"].get("nodeName") or (meant[0] if len(meant) == 1 else "")


def cluster_gaps(entries: dict, objects: list) -> list:
    """The gaps of the cluster around its judged runtimes (``entries``: node name -> ``judge``'s
    entry): RuntimeClasses whose handler none of them loads, then the fleet's objects' own
    (``fleet_object_gaps``). A node or DaemonSet elsewhere in the cluster is not the fleet's.

        cluster_gaps({"gpu-a": {"loaded": ["runc"], ...}}, objects)
        -> [{"kind": "runtimeclass-handler-nowhere", ...}, {"kind": "rollout-stalled", ...}]
    """
    loaded = {h for n in entries.values() for h in n["loaded"]}
    gaps = [
        gap(
            "runtimeclass-handler-nowhere",
            rc["metadata"]["name"],
            ["scheduled", "loaded"],
            f"RuntimeClass {rc['metadata']['name']}: no audited node loads its handler {rc.get('handler')}",
        )
        for rc in of_kind(objects, "RuntimeClass")
        if rc.get("handler") not in loaded
    ]
    return gaps + fleet_object_gaps(list(entries), objects)


def fleet_object_gaps(names, objects: list) -> list:
    """The gaps of the cluster's objects on the fleet's nodes (``names``), with no runtime's view:
    Nodes whose Pods hold more GPUs than they advertise, and DaemonSets whose rollout stalled with a
    Pod on one of them (the toolkit's: the seed's step 8). The agent reach asks these alone, its
    agents saying no handler.

        fleet_object_gaps(["gpu-a"], objects) -> [{"kind": "rollout-stalled", ...}]
    """
    pods, names = of_kind(objects, "Pod"), set(names)
    gaps = [
        g for g in (overcommitted(n, pods) for n in of_kind(objects, "Node") if n["metadata"]["name"] in names) if g
    ]
    ours = [ds for ds in of_kind(objects, "DaemonSet") if any(node_of(p) in names for p in owned_pods(ds, pods))]
    return gaps + [g for g in (stalled_rollout(ds, pods) for ds in ours) if g]


def time_slicing_replicas(objects: list, configmap: str) -> int | None:
    """The replicas the time-slicing ConfigMap ``configmap`` (``namespace/name``) gives a GPU; None
    where it is missing or says none."""
    cm = next((c for c in of_kind(objects, "ConfigMap") if ref(c) == configmap), None)
    return replicas_of((cm or {}).get("data", {}).get("any", "")) if cm else None


def lab_host_gaps(loaded: list, objects: list, time_slicing: dict) -> tuple:
    """The gaps of the cluster around a lab host, whose one runtime stands for every node: each
    RuntimeClass whose handler it does not load (``unloaded_class``), each Node overcommitted and the
    time-sliced node's arithmetic (``time_slicing_gaps``), each DaemonSet stalled; in that order, as
    the lab's report prints them. With the time-sliced node's warning.

    + time_slicing: {"node", "physical_gpus", "vram_per_gpu_gib", "configmap": "ns/name"}

        lab_host_gaps(["runc"], objects, time_slicing)
        -> ([{"kind": "runtimeclass-handler-not-loaded", ...}, ...], [{"kind": "time-sliced-memory-shared", ...}])
    """
    pods = of_kind(objects, "Pod")
    gaps = [g for g in (unloaded_class(rc, loaded, pods) for rc in of_kind(objects, "RuntimeClass")) if g]
    replicas, warnings = time_slicing_replicas(objects, time_slicing["configmap"]), []
    for node in of_kind(objects, "Node"):
        gaps += [g for g in [overcommitted(node, pods)] if g]
        if node["metadata"]["name"] == time_slicing["node"] and replicas is not None:
            mismatch, shared = time_slicing_gaps(node, replicas, time_slicing)
            gaps, warnings = gaps + mismatch, warnings + shared
    gaps += [g for g in (stalled_rollout(ds, pods) for ds in of_kind(objects, "DaemonSet")) if g]
    return gaps, warnings
