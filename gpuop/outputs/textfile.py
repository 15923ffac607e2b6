"""The audit in Prometheus' text format, for node_exporter's textfile collector: one writer for
every target, a fleet's report or a lab host's (``host_report``), the same series.

Prometheus' own client writes the format (escaping, HELP and TYPE lines, an atomic rename), so
a cron job that runs the audit on a schedule feeds alerts without a parser of ours.
"""

import json
import os

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

CRI_STATES = ("ok", "fails", "refuses-start", "unknown")


def host_report(node: str, result: dict) -> dict:
    """A lab host's audit (``gpuop.judgment.lab_audit.audit``, whose keys hold its node entry) as a report of
    one node, the fleet report's shape: ``host_report("lab-node-0", result)["nodes"]``."""
    return {"nodes": {node: result}, "gaps": []}


def registry_of(report: dict) -> CollectorRegistry:
    """The fleet report as gauges, one series per node (and per handler, kind, state).

    generate_latest(registry_of(report)).decode()
    -> '# HELP gpuop_node_gaps Gaps the audit found on a node, by kind ...'
    """
    registry = CollectorRegistry()
    g = _node_gauges(registry)
    for name, node in report["nodes"].items():
        _set_node(g, name, node)
    fleet = Gauge("gpuop_fleet_gaps", "Gaps of the fleet as a whole, by kind", ["kind"], registry=registry)
    for gap in report["gaps"]:
        fleet.labels(gap["kind"]).inc()
    return registry


def _node_gauges(registry: CollectorRegistry) -> dict:
    """The per-node gauges of the fleet report, by short name, in ``registry``."""
    gaps = Gauge("gpuop_node_gaps", "Gaps the audit found on a node, by kind", ["node", "kind"], registry=registry)
    count = Gauge("gpuop_node_gap_count", "Gaps the audit found on a node, all kinds", ["node"], registry=registry)
    at_risk = Gauge(
        "gpuop_node_pods_at_risk",
        "Pods on a node that cannot start a sandbox now or after a containerd restart",
        ["node"],
        registry=registry,
    )
    handler = Gauge(
        "gpuop_node_runtime_handler",
        "Runtime handlers of a node's containerd: 1 when present in the view",
        ["node", "handler", "view"],
        registry=registry,
    )
    cri = Gauge(
        "gpuop_node_cri_after_restart",
        "What a containerd restart does to CRI: 1 for the state forecast",
        ["node", "state"],
        registry=registry,
    )
    info = Gauge(
        "gpuop_node_containerd_info",
        "The containerd that serves kubelet on a node",
        ["node", "version"],
        registry=registry,
    )
    runtime = Gauge(
        "gpuop_node_runtime_info",
        "The runtime that serves kubelet on a node (containerd, cri-o)",
        ["node", "runtime", "version"],
        registry=registry,
    )
    condition = Gauge(
        "gpuop_node_condition",
        "The node agent's conditions as the audit's judgment sets them: 1 for each one's status",
        ["node", "condition", "status"],
        registry=registry,
    )
    return {
        "gaps": gaps,
        "count": count,
        "at_risk": at_risk,
        "handler": handler,
        "cri": cri,
        "info": info,
        "runtime": runtime,
        "condition": condition,
    }


def _set_node(g: dict, name: str, node: dict) -> None:
    """Node ``name``'s series from its report entry, in the gauges ``_node_gauges`` made."""
    g["count"].labels(name).set(len(node["gaps"]))
    for gap in node["gaps"]:
        g["gaps"].labels(name, gap["kind"]).inc()
    g["at_risk"].labels(name).set(node["pods_at_risk"])
    for view in ("written", "loaded", "after_restart"):
        for h in node[view]:
            g["handler"].labels(name, h, view).set(1)
    for state in CRI_STATES:
        g["cri"].labels(name, state).set(1 if node["cri_after_restart"] == state else 0)
    g["runtime"].labels(name, node["runtime"], node["version"]).set(1)
    for kind, status in (node.get("conditions") or {}).items():  # a fleet's node (a lab host's has none)
        for state in ("True", "False", "Unknown"):
            g["condition"].labels(name, kind, state).set(1 if status == state else 0)
    if node["runtime"] == "containerd":
        g["info"].labels(name, node["version"]).set(1)


def textfile(report: dict) -> str:
    """The report's text as node_exporter reads it."""
    return generate_latest(registry_of(report)).decode()


def write_textfile(path: str, registry: CollectorRegistry):
    """Write gauges (``registry_of``, ``repair_registry``) where node_exporter's textfile collector
    reads them (atomically)."""
    write_to_textfile(path, registry)


def repair_registry(report: dict) -> CollectorRegistry:
    """The fleet repair's report as gauges: one series per node, its outcome.

    generate_latest(repair_registry({"nodes": {"gpu-a": {"outcome": "repaired", ...}}})).decode()
    -> '... gpuop_node_repaired{node="gpu-a",outcome="repaired"} 1.0 ...'
    """
    registry = CollectorRegistry()
    repaired = Gauge(
        "gpuop_node_repaired",
        "What the last fleet repair did to a node: 1 for its outcome",
        ["node", "outcome"],
        registry=registry,
    )
    for name, node in report["nodes"].items():
        repaired.labels(name, node["outcome"]).set(1)
    return registry


def write_reports(doc: dict, json_path: str, textfile_path: str, gauges):
    """A run's report on this machine: the JSON at ``json_path`` and ``gauges(doc)``
    (``registry_of``, ``repair_registry``) at ``textfile_path``, each written whole; empty: none.

        write_reports(report, "fleet.json", "", registry_of)
    """
    if json_path:
        with open(json_path + ".tmp", "w") as f:
            f.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        os.replace(json_path + ".tmp", json_path)
    if textfile_path:
        write_textfile(textfile_path, gauges(doc))
