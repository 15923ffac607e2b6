"""One node's judgment as JSON (``node_entry``), the same for every target: a node of the fleet
report and a lab host's audit.json; the Pods its gaps put at risk."""

from gpuop.judgment.cluster import active
from gpuop.judgment.driver import has_driver, summary
from gpuop.judgment.node_rules import DRIVER, gpu_paths, node_gpus
from gpuop.judgment.objects import of_kind
from gpuop.judgment.view import api_handlers
from gpuop.judgment.viewtype import View

AT_RISK = (
    "sandbox-fails",
    "sandbox-refuses-loaded",
    "handler-gone-after-restart",
    "gpu-pod-cdi-off",
    "cdi-spec-missing",
    "dra-claim-cdi-off",
)


def pods_at_risk(gaps: list) -> int:
    """How many Pods a node's gaps name (cannot start, will not after a restart, or run without
    their GPU)."""
    return len({g["subject"] for g in gaps if g["kind"] in AT_RISK})


def node_entry(
    runtime: View,
    gaps: list,
    node: dict | None = None,
    objects: list = (),
    gpu_handler: str = "nvidia",
    gpu_driver: str = DRIVER,
) -> dict:
    """One node's judgment as JSON, the same for every target: a node of the fleet report (its
    ``nodes.<name>``) and a lab host's audit.json (beside the lab's own readings);
    ``runtime_handlers`` is the API's view of what is loaded (``api_handlers`` of its Node),
    beside the node's own. ``pods_at_risk``: the Pods its gaps name, and every active Pod bound
    to it (``objects``) where its runtime would not start again. ``gpu_path``: how a GPU reaches a
    container there (``gpu_paths``); ``gpus``: the GPUs it offers (``node_gpus``); ``driver``: its
    NVIDIA driver's three views (``gpuop.judgment.driver.summary``), only where the node has one.

        node_entry(node_view(read), findings(...), node, objects)["cri_after_restart"] -> "fails"
    """
    at_risk = pods_at_risk(gaps)
    if node is not None and any(g["kind"] == "restart-refuses-start" for g in gaps):
        at_risk = sum(
            1 for p in of_kind(objects, "Pod") if p["spec"].get("nodeName") == node["metadata"]["name"] and active(p)
        )
    return {
        "runtime_handlers": api_handlers(node) if node else None,
        "runtime": runtime["runtime"],
        "version": runtime["version"],
        "daemon": runtime["daemon"],
        "loaded": runtime["loaded"],
        "loaded_from": runtime["loaded_from"],
        "written": runtime["written"],
        "default_runtime": runtime.get("default_runtime", ""),
        "cdi": runtime.get("cdi"),
        "after_restart": runtime["after_restart"],
        "cri_after_restart": runtime["cri_after_restart"],
        "regenerated_by": (runtime.get("regenerated") or {}).get("by"),
        "regenerated_from": (runtime.get("regenerated") or {}).get("template"),
        "kubelet_endpoint": runtime["kubelet_endpoint"],
        "pods_at_risk": at_risk,
        "gpu_path": gpu_paths(runtime, gpu_handler),
        "gpus": node_gpus(node, objects, gpu_driver) if node else None,
        **({"driver": summary(runtime["driver"])} if has_driver(runtime.get("driver")) else {}),
        "gaps": gaps,
    }
