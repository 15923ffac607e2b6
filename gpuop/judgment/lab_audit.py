"""The audit: written against loaded against scheduled, from live objects, as findings.

A finding is a gap (gpuop/judgment/gaps.py) between what was written and what is live, the same shape as
the fleet audit's, naming the views it joins; everything else the audit reads
(loaded handlers, GPU use per node, Pending Pods by reason, rollouts) is reported beside them.
"""

from gpuop.judgment.cluster import allocatable_count, classed_pods, rollout_status
from gpuop.judgment.cluster_rules import gpus_held, stalled_rollout, time_slicing_replicas
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.rules import judge
from gpuop.judgment.sandbox import kubelet_agrees, sandbox_refusal
from gpuop.judgment.scheduling import pod_scheduled, reasons, unschedulable
from gpuop.judgment.view import api_handlers
from gpuop.judgment.viewtype import View


def _sandboxes(view: View, objects: list, events: list, kubelet_node: str) -> list:
    """For each Pod bound to the kubelet node whose RuntimeClass's handler is not loaded: the sandbox
    failure containerd's version gives, held against the kubelet's live event for that Pod."""
    return [
        {
            "pod": ref(pod),
            "node": kubelet_node,
            "handler": handler,
            "forecast": sandbox_refusal(view, handler),
            **kubelet_agrees(pod, events, sandbox_refusal(view, handler)),
        }
        for pod, _, handler in classed_pods(kubelet_node, objects)
        if handler not in view["loaded"]
    ]


def audit(view: View, objects: list, time_slicing: dict, kubelet_node: str = "") -> dict:
    """Findings and readings for one host: the one judgment of its runtime (``gpuop.judgment.rules``,
    as a real node's), and the lab's own readings beside it.

    + view: the lab containerd's view (``gpuop.judgment.view.lab_view``)
    + objects: live RuntimeClasses, Nodes, Pods, DaemonSets and ConfigMaps (kubectl's JSON)
    + time_slicing: {"node", "physical_gpus", "vram_per_gpu_gib", "configmap": "ns/name"} of the
      time-sliced node
    + kubelet_node: the lab node a real kubelet runs, whose sandbox failures are held against its
      kubelet's events (``objects`` then holds Events too); empty: none

        audit(lab_view(...), objects, {...})["gaps"]
        -> [{"kind": "restart-takes-cri-down", ...}, {"kind": "handler-not-loaded", ...}, ...]
    """
    judged = judge(view, objects, kubelet_node, lab_host=time_slicing)  # every gap, from the one door
    warnings, pods = judged.pop("warnings"), of_kind(objects, "Pod")
    return {
        **judged,
        **({"sandboxes": _sandboxes(view, objects, of_kind(objects, "Event"), kubelet_node)} if kubelet_node else {}),
        "handlers": _handlers(view, objects, kubelet_node),
        "runtimeclasses": _runtimeclasses(objects, view["loaded"], pods),
        "nodes": _nodes(objects, pods, time_slicing),
        "pending": _pending(pods),
        "daemonsets": _daemonsets(objects, pods),
        "warnings": warnings,  # last, as the report has always had it
    }


def _runtimeclasses(objects: list, loaded: list, pods: list) -> list:
    """Each RuntimeClass, whether the runtime loads its handler, and the Pods of it."""
    classes = []
    for rc in of_kind(objects, "RuntimeClass"):
        users = [ref(p) for p in pods if p["spec"].get("runtimeClassName") == rc["metadata"]["name"]]
        classes.append(
            {"name": rc["metadata"]["name"], "handler": rc["handler"], "loaded": rc["handler"] in loaded, "pods": users}
        )
    return classes


def _nodes(objects: list, pods: list, time_slicing: dict) -> list:
    """Each Node's GPUs advertised and held, and the time-sliced node's arithmetic."""
    replicas, nodes = time_slicing_replicas(objects, time_slicing["configmap"]), []
    for node in of_kind(objects, "Node"):
        name = node["metadata"]["name"]
        entry = {"name": name, "advertised": allocatable_count(node), "requested": gpus_held(name, pods)}
        if name == time_slicing["node"] and replicas is not None:
            physical = time_slicing["physical_gpus"]
            entry["time_sliced"] = {"physical": physical, "replicas": replicas, "expected": physical * replicas}
        nodes.append(entry)
    return nodes


def _pending(pods: list) -> dict:
    """The Pods the scheduler refuses, by each reason it gives (sorted)."""
    pending = {}
    for pod in pods:
        if pod["status"].get("phase") == "Pending" and unschedulable(pod):
            for _, reason in reasons(pod_scheduled(pod).get("message", "")) or [(0, "Unschedulable")]:
                pending.setdefault(reason, []).append(ref(pod))
    return {reason: sorted(refs) for reason, refs in sorted(pending.items())}


def _daemonsets(objects: list, pods: list) -> list:
    """Each DaemonSet's rollout, and whether it stalled (``stalled_rollout``)."""
    daemonsets = []
    for ds in of_kind(objects, "DaemonSet"):
        status, stalled = rollout_status(ds, pods), stalled_rollout(ds, pods)
        daemonsets.append(
            {
                "name": ref(ds),
                "desired": status["DESIRED"],
                "updated": status["UPDATED"],
                "ready": status["READY"],
                "max_unavailable": status["MAX_UNAVAILABLE"],
                "stalled": stalled is not None,
                "blocker": status["BLOCKER"],
            }
        )
    return daemonsets


def _handlers(view: View, objects: list, kubelet_node: str) -> dict:
    """The runtime's handlers written, loaded (and the kubelet node's Node's word on them) and after
    a restart, as the lab's report prints them."""
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == kubelet_node), None)
    restart = view["cri_after_restart"]
    return {
        "written": view["written"],
        "loaded": view["loaded"],
        **({"runtime_handlers": api_handlers(node) if node else None} if kubelet_node else {}),
        "loaded_source": {"cri": "live"}.get(view["loaded_from"], view["loaded_from"]),
        "containerd_version": view["version"],
        "after_restart": None if restart == "unknown" else view["after_restart"],
        "restart_cri": {"ok": "ok", "unknown": "unknown"}.get(restart, "fails"),
    }
