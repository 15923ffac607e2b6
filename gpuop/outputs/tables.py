"""What a person reads first: the audit's tables, for every target from one module.

A lab host's table has one row per reading (``host_table``), the fleet's one line per node
(``fleet_table``). Both read a node from its one JSON entry (``gpuop.judgment.entry.node_entry``), list its
handlers the same way and show first the gap that puts every Pod at risk: a runtime that would
not start again.
"""


def handlers(names) -> str:
    """Handlers as one cell: ``handlers(["nvidia", "runc"]) -> "nvidia,runc"``, none: ``"-"``."""
    return ",".join(names) or "-"


def worst_first(gaps: list) -> list:
    """Gaps in the order to read them: a runtime that would refuse to start first (every Pod on
    its node is at risk), the rest as found.

        worst_first([{"kind": "handler-not-loaded"}, {"kind": "restart-refuses-start"}])
        -> [{"kind": "restart-refuses-start"}, {"kind": "handler-not-loaded"}]
    """
    return sorted(gaps, key=lambda g: g["kind"] != "restart-refuses-start")


def key_values(rows: list) -> list:
    """Rows of (key, value) with the values in one column.

    key_values([("written", "nvidia"), ("after restart", "-")])
    -> ["written        nvidia", "after restart  -"]
    """
    width = max(len(k) for k, _ in rows)
    return [f"{k.ljust(width)}  {v}" for k, v in rows]


def columns(rows: list) -> list:
    """Rows of cells in aligned columns (the first row is the head)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def host_table(result: dict) -> list:
    """A lab host's audit (``gpuop.judgment.lab_audit.audit``) as rows: its runtime from its node entry, then
    the lab's readings, then every gap and the verdict.

        host_table(audit(...)) -> ["written        nvidia,runc (the main config and its drop-ins)", ...]
    """
    v = result["version"]
    source = {
        "cri": f"live, through CRI of containerd {v}",
        "cri-down": f"containerd {v} runs, its CRI does not answer",
    }
    rows = [
        ("written", f"{handlers(result['written'])} (the main config and its drop-ins)"),
        ("loaded", f"{handlers(result['loaded'])} ({source.get(result['loaded_from'], 'recorded')})"),
    ]
    if result["cri_after_restart"] == "unknown":
        rows.append(("after restart", "unknown (no lab containerd here to ask)"))
    else:
        cri = {"ok": "CRI loads", "refuses-start": "containerd REFUSES TO START"}.get(
            result["cri_after_restart"], "CRI FAILS"
        )
        rows.append(
            ("after restart", f"{handlers(result['after_restart'])}; {cri} (containerd {v}'s own merge of the files)")
        )
    for rc in result["runtimeclasses"]:
        rows.append(
            (
                "runtimeclass",
                f"{rc['name']} -> {rc['handler']} "
                f"({'loaded' if rc['loaded'] else 'NOT loaded'}); pods: {','.join(rc['pods']) or '-'}",
            )
        )
    for n in result["nodes"]:
        sliced = n.get("time_sliced")
        extra = f" (time-sliced {sliced['physical']}x{sliced['replicas']}={sliced['expected']})" if sliced else ""
        rows.append(("gpus", f"{n['name']} advertised {n['advertised']}, requested {n['requested']}{extra}"))
    for reason, refs in result["pending"].items():
        rows.append(("pending", f"{reason}: {', '.join(refs)}"))
    for ds in result["daemonsets"]:
        rows.append(
            (
                "daemonset",
                f"{ds['name']} {ds['updated']}/{ds['desired']} updated, {ds['ready']} ready, "
                f"maxUnavailable {ds['max_unavailable']}" + (f", STALLED: {ds['blocker']}" if ds["stalled"] else ""),
            )
        )
    for s in result.get("sandboxes", []):
        rows.append(
            (
                "sandbox",
                f"{s['pod']} on {s['node']}: {'the kubelet agrees' if s['agrees'] else 'the kubelet does NOT agree'}"
                f" ({s['event'] or 'no event yet'})",
            )
        )
    rows += [("warning", w["detail"]) for w in result["warnings"]]
    rows += [("GAP", g["detail"]) for g in worst_first(result["gaps"])]
    rows.append(
        ("verdict", f"{len(result['gaps'])} gap(s)" if result["gaps"] else "no gap: written is loaded is scheduled")
    )
    return key_values(rows)


FLEET_COLUMNS = (
    "NODE",
    "RUNTIME",
    "LOADED",
    "AFTER RESTART",
    "CRI AFTER RESTART",
    "GPU PATH",
    "PODS AT RISK",
    "GAPS",
    "PROBLEM",
    "RESTART UNSAFE",
)


def _fleet_row(name: str, n: dict) -> tuple:
    """One node's line of the fleet table, in ``FLEET_COLUMNS``' order."""
    loaded = {
        "cri": handlers(n["loaded"]),
        "status": f"{handlers(n['loaded'])} (status)",
        "api": f"{handlers(n['loaded'])} (api)",
    }.get(n["loaded_from"], n["loaded_from"])
    conditions = n.get("conditions") or {}
    return (
        name,
        "none" if n["version"] == "none" else f"{n['runtime']} {n['version']}",
        loaded,
        handlers(n["after_restart"]),
        n["cri_after_restart"],
        handlers(n.get("gpu_path") or []),
        str(n["pods_at_risk"]),
        str(len(n["gaps"])),
        conditions.get("GPURuntimeProblem", "-"),
        conditions.get("GPURuntimeRestartUnsafe", "-"),
    )


def fleet_table(report: dict) -> list:
    """The fleet as a table, one line per node, then every gap (a node whose runtime would not
    start again first).

        fleet_table({"nodes": {"gpu-a": {...}}, "gaps": []})
        -> ["NODE   RUNTIME            LOADED  AFTER RESTART  CRI AFTER RESTART  GPU PATH  PODS AT RISK  GAPS", ...]

    RUNTIME: the runtime that serves the node and its version (``containerd 2.4.2``,
    ``cri-o 1.36.3``; ``none`` where none runs). LOADED: what CRI answered (CRI-O's own status API on a node
    with no crictl, marked ``(status)``); what the kubelet reports, marked ``(api)``, where the
    node was not read; else why not. GPU PATH: how a GPU reaches a container there
    (``handler``, ``cdi``, ``oci-hook``, or ``-``). PROBLEM, RESTART UNSAFE: the node agent's two
    conditions as its judgment sets them (``condition.with_conditions``), and each gap says which
    one it sets.
    """

    nodes = sorted(report["nodes"].items())
    lines = columns([FLEET_COLUMNS] + [_fleet_row(name, n) for name, n in nodes])
    refusing = [item for item in nodes if item[1]["cri_after_restart"] == "refuses-start"]
    lines += [
        f"GAP {name}: [{g['kind']}] {g['detail']}" + (f" (sets {g['condition']})" if g.get("condition") else "")
        for name, n in refusing + [item for item in nodes if item not in refusing]
        for g in worst_first(n["gaps"])
    ]
    lines += [f"GAP fleet: [{g['kind']}] {g['detail']}" for g in report["gaps"]]
    total = sum(len(n["gaps"]) for n in report["nodes"].values()) + len(report["gaps"])
    lines.append(
        f"{total} gap(s) on {len(report['nodes'])} node(s)"
        if total
        else f"no gap on {len(report['nodes'])} node(s): written is loaded is scheduled"
    )
    return lines
