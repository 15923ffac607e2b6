"""The fleet's report: one entry per node (its view and its findings, ``gpuop.view`` and
``gpuop.rules``), the gaps of the fleet as a whole, and the table a person reads first.
"""

from .gaps import gap
from .objects import of_kind


def fleet_gaps(nodes: dict, objects: list) -> list:
    """Gaps of the fleet as a whole: RuntimeClasses whose handler no audited node loads.

        fleet_gaps({"gpu-a": {"loaded": ["runc"], ...}}, objects)
        -> [{"kind": "runtimeclass-handler-nowhere", ...}]
    """
    loaded = {h for n in nodes.values() for h in n["loaded"]}
    return [gap("runtimeclass-handler-nowhere", rc["metadata"]["name"], ["scheduled", "loaded"],
                 f"RuntimeClass {rc['metadata']['name']}: no audited node loads its handler {rc.get('handler')}")
            for rc in of_kind(objects, "RuntimeClass") if rc.get("handler") not in loaded]


def _worst_first(item) -> tuple:
    name, node = item
    return (node["cri_after_restart"] != "refuses-start", name)


def fleet_table(report: dict) -> list:
    """The fleet as a table, one line per node, then every gap.

        fleet_table({"nodes": {"gpu-a": {...}}, "gaps": []})
        -> ["NODE   VERSION  LOADED  AFTER RESTART  CRI AFTER RESTART  GPU PATH  PODS AT RISK  GAPS", ...]

    GPU PATH: how a GPU reaches a container there (``handler``, ``cdi``, both, or ``-``).
    """
    head = ("NODE", "VERSION", "LOADED", "AFTER RESTART", "CRI AFTER RESTART", "GPU PATH", "PODS AT RISK", "GAPS")
    def loaded(n):  # what CRI answered; what the kubelet reports where the node was not read; else why not
        handlers = ",".join(n["loaded"]) or "-"
        return {"cri": handlers, "api": f"{handlers} (api)"}.get(n["loaded_from"], n["loaded_from"])

    rows = [head] + [(name, n["version"], loaded(n), ",".join(n["after_restart"]) or "-", n["cri_after_restart"],
                      ",".join(n.get("gpu_path") or []) or "-", str(n["pods_at_risk"]), str(len(n["gaps"])))
                     for name, n in sorted(report["nodes"].items())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    # a node whose runtime would not start again first: every Pod on it is at risk
    lines += [f"GAP {name}: [{g['kind']}] {g['detail']}" for name, n in sorted(report["nodes"].items(), key=_worst_first)
              for g in n["gaps"]]
    lines += [f"GAP fleet: [{g['kind']}] {g['detail']}" for g in report["gaps"]]
    total = sum(len(n["gaps"]) for n in report["nodes"].values()) + len(report["gaps"])
    lines.append(f"{total} gap(s) on {len(report['nodes'])} node(s)" if total
                 else f"no gap on {len(report['nodes'])} node(s): written is loaded is scheduled")
    return lines
