"""The audit: written against loaded against scheduled, from live objects, as findings.

A finding is a gap (gpuop/gaps.py) between what was written and what is live, the same shape as
the fleet audit's, naming the views it joins; everything else the audit reads
(loaded handlers, GPU use per node, Pending Pods by reason, rollouts) is reported beside them.
"""

from .cluster import allocatable_count, gpus_asked, rollout_complete, rollout_settled, rollout_status, sandbox_failure
from .fleet import api_disagrees, api_handlers, sandbox_error, says_sandbox_error
from .gaps import gap
from .objects import of_kind, ref
from .scheduling import pod_scheduled, reasons, unschedulable
from .slots import replicas_of


def _active(pod) -> bool:
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def _loaded_view(runtime: dict) -> str:
    """Which view the loaded handlers come from, in words."""
    return {"cri": f"loaded, live through CRI of containerd {runtime['version']}",
            "cri-down": f"loaded: containerd {runtime['version']} runs but its CRI does not answer",
            }.get(runtime["loaded_from"], "recorded: the incident day's observation, no lab containerd here")


def _runtime_gaps(runtime: dict) -> list:
    gaps = []
    restart = runtime.get("restart")
    if restart is not None and not restart["cri_ok"]:
        gaps.append(gap("restart-takes-cri-down", "containerd", ["after-restart"],
                        f"a restart of containerd on this node takes CRI down: {restart['reason']} "
                        f"(after restart: containerd {runtime['version']}'s own merge of the files)"))
    if runtime["loaded_from"] == "cri-down":
        gaps.append(gap("cri-down", "containerd", ["loaded"],
                        f"containerd runs but its CRI does not answer ({_loaded_view(runtime)}): "
                        "no Pod can start on this node"))
    for handler in runtime["written"]:
        if handler not in runtime["loaded"]:
            gaps.append(gap("handler-not-loaded", handler, ["written", "loaded"],
                            f"runtime handler {handler} is written but not loaded ({_loaded_view(runtime)})"))
    return gaps


def _sandboxes(runtime: dict, objects: list, real_node: str, gaps: list) -> list:
    """For each Pod bound to the real node whose RuntimeClass's handler is not loaded: the sandbox
    failure containerd's version gives (``gpuop.fleet.sandbox_error``), held against the kubelet's
    live event for that Pod; a gap either way, saying whether the kubelet agrees."""
    handlers = {rc["metadata"]["name"]: rc["handler"] for rc in of_kind(objects, "RuntimeClass")}
    events = of_kind(objects, "Event")
    found = []
    for pod in of_kind(objects, "Pod"):
        handler = handlers.get(pod["spec"].get("runtimeClassName"))
        if pod["spec"].get("nodeName") != real_node or handler is None or handler in runtime["loaded"]:
            continue
        forecast = sandbox_error(runtime["version"], handler)
        event = sandbox_failure(events, pod)
        agrees = bool(event) and says_sandbox_error(event["message"], runtime["version"], handler)
        found.append({"pod": ref(pod), "node": real_node, "handler": handler, "forecast": forecast,
                      "event": event["message"] if event else None, "agrees": agrees})
        kubelet = ("the kubelet's event agrees" if agrees
                   else f"the kubelet's event says otherwise: {event['message']}" if event
                   else "no kubelet event for it yet")
        gaps.append(gap("sandbox-fails", ref(pod), ["scheduled", "loaded"],
                        f"Pod {ref(pod)} on {real_node} cannot start its sandbox: containerd "
                        f"{runtime['version']} says {forecast}; {kubelet}"))
    return found


def audit(runtime: dict, objects: list, time_slicing: dict, real_node: str = "") -> dict:
    """Findings and readings for one host.

    + runtime: the runtime handlers in each view: {"written": [...], "loaded": [...],
      "loaded_from": "cri" | "cri-down" | "recorded", "version": containerd's release or "none",
      "restart": {"runtimes", "cri_ok", "reason"} or None where there is no lab containerd}
    + objects: live RuntimeClasses, Nodes, Pods, DaemonSets and ConfigMaps (kubectl's JSON)
    + time_slicing: {"node", "physical_gpus", "vram_per_gpu_gib", "configmap": "ns/name"} of the
      time-sliced node
    + real_node: the lab node a real kubelet runs, whose sandbox failures are held against its
      kubelet's events (``objects`` then holds Events too); empty: none

        audit({"written": ["runc", "nvidia"], "loaded": ["runc"], "loaded_from": "cri", ...},
              objects, {...})["gaps"]
        -> [{"kind": "restart-takes-cri-down", ...}, {"kind": "handler-not-loaded", ...}, ...]
    """
    gaps, warnings = _runtime_gaps(runtime), []
    pods = of_kind(objects, "Pod")
    loaded = runtime["loaded"]

    classes = []
    for rc in of_kind(objects, "RuntimeClass"):
        users = [ref(p) for p in pods if p["spec"].get("runtimeClassName") == rc["metadata"]["name"]]
        ok = rc["handler"] in loaded
        classes.append({"name": rc["metadata"]["name"], "handler": rc["handler"], "loaded": ok, "pods": users})
        if not ok:
            gaps.append(gap("runtimeclass-handler-not-loaded", rc["metadata"]["name"], ["scheduled", "loaded"],
                            f"RuntimeClass {rc['metadata']['name']}: handler {rc['handler']} not "
                            f"loaded; its Pods fail as soon as they are recreated: "
                            f"{', '.join(users) or 'none now'}"))

    ts_ref = time_slicing["configmap"]
    cm = next((c for c in of_kind(objects, "ConfigMap") if ref(c) == ts_ref), None)
    replicas = replicas_of((cm or {}).get("data", {}).get("any", "")) if cm else None
    nodes = []
    for node in of_kind(objects, "Node"):
        name = node["metadata"]["name"]
        advertised = allocatable_count(node)
        asked = sum(gpus_asked(p) for p in pods if p["spec"].get("nodeName") == name and _active(p))
        entry = {"name": name, "advertised": advertised, "requested": asked}
        if asked > advertised:
            gaps.append(gap("gpus-overcommitted", name, ["scheduled"],
                            f"node {name}: Pods hold {asked} GPUs, it advertises {advertised}"))
        if name == time_slicing["node"] and replicas is not None:
            expected = time_slicing["physical_gpus"] * replicas
            entry["time_sliced"] = {"physical": time_slicing["physical_gpus"], "replicas": replicas,
                                    "expected": expected}
            warnings.append(gap("time-sliced-memory-shared", name, ["scheduled"],
                                f"node {name}: {replicas} time-sliced slots per GPU share the GPU's "
                                f"whole {time_slicing['vram_per_gpu_gib']} GiB; a slot is guaranteed "
                                "0 GiB, with no memory or fault isolation (time-slicing's design, "
                                "not a fault to repair)"))
            if advertised != expected:
                gaps.append(gap("time-slicing-mismatch", name, ["written", "scheduled"],
                                f"node {name} advertises {advertised} GPUs, but {ts_ref} gives "
                                f"{time_slicing['physical_gpus']} x {replicas} = {expected}"))
        nodes.append(entry)

    pending = {}
    for pod in pods:
        if pod["status"].get("phase") == "Pending" and unschedulable(pod):
            for _, reason in reasons(pod_scheduled(pod).get("message", "")) or [(0, "Unschedulable")]:
                pending.setdefault(reason, []).append(ref(pod))

    daemonsets = []
    for ds in of_kind(objects, "DaemonSet"):
        status = rollout_status(ds, pods)
        stalled = rollout_settled(ds, pods) and not rollout_complete(ds)
        daemonsets.append({"name": ref(ds), "desired": status["DESIRED"], "updated": status["UPDATED"],
                           "ready": status["READY"], "max_unavailable": status["MAX_UNAVAILABLE"],
                           "stalled": stalled, "blocker": status["BLOCKER"]})
        if stalled:
            gaps.append(gap("rollout-stalled", ref(ds), ["scheduled"],
                            f"DaemonSet {ref(ds)}: rollout stalled at {status['UPDATED']}/"
                            f"{status['DESIRED']} updated, blocker {status['BLOCKER']}"))

    sandboxes = _sandboxes(runtime, objects, real_node, gaps) if real_node else None
    # A real kubelet reports its runtime's handlers on its Node: the API's view of "loaded".
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == real_node), None)
    if node is not None:
        gaps += api_disagrees(node, loaded, runtime["loaded_from"], runtime["version"])
    return {
        **({"sandboxes": sandboxes} if real_node else {}),
        "handlers": {"written": runtime["written"], "loaded": loaded,
                     **({"runtime_handlers": api_handlers(node) if node else None} if real_node else {}),
                     "loaded_source": {"cri": "live"}.get(runtime["loaded_from"], runtime["loaded_from"]),
                     "containerd_version": runtime["version"],
                     "after_restart": runtime["restart"]["runtimes"] if runtime.get("restart") else None,
                     "restart_cri": ("unknown" if not runtime.get("restart")
                                     else "ok" if runtime["restart"]["cri_ok"] else "fails")},
        "runtimeclasses": classes,
        "nodes": nodes,
        "pending": {reason: sorted(refs) for reason, refs in sorted(pending.items())},
        "daemonsets": daemonsets,
        "gaps": gaps,
        "warnings": warnings,
    }


def table(result: dict) -> list:
    """The findings as a compact table, what a person reads first."""
    h = result["handlers"]
    source = {"live": f"live, through CRI of containerd {h['containerd_version']}",
              "cri-down": f"containerd {h['containerd_version']} runs, its CRI does not answer"}
    rows = [("written", f"{','.join(h['written']) or '-'} (the main config and its drop-ins)"),
            ("loaded", f"{','.join(h['loaded']) or '-'} ({source.get(h['loaded_source'], 'recorded')})")]
    if h["after_restart"] is None:
        rows.append(("after restart", "unknown (no lab containerd here to ask)"))
    else:
        rows.append(("after restart", f"{','.join(h['after_restart']) or '-'}; CRI "
                                      f"{'loads' if h['restart_cri'] == 'ok' else 'FAILS'} "
                                      f"(containerd {h['containerd_version']}'s own merge of the files)"))
    for rc in result["runtimeclasses"]:
        rows.append(("runtimeclass", f"{rc['name']} -> {rc['handler']} "
                                     f"({'loaded' if rc['loaded'] else 'NOT loaded'}); pods: {','.join(rc['pods']) or '-'}"))
    for n in result["nodes"]:
        sliced = n.get("time_sliced")
        extra = f" (time-sliced {sliced['physical']}x{sliced['replicas']}={sliced['expected']})" if sliced else ""
        rows.append(("gpus", f"{n['name']} advertised {n['advertised']}, requested {n['requested']}{extra}"))
    for reason, refs in result["pending"].items():
        rows.append(("pending", f"{reason}: {', '.join(refs)}"))
    for ds in result["daemonsets"]:
        rows.append(("daemonset", f"{ds['name']} {ds['updated']}/{ds['desired']} updated, {ds['ready']} ready, "
                                  f"maxUnavailable {ds['max_unavailable']}"
                                  + (f", STALLED: {ds['blocker']}" if ds["stalled"] else "")))
    for s in result.get("sandboxes", []):
        rows.append(("sandbox", f"{s['pod']} on {s['node']}: {'the kubelet agrees' if s['agrees'] else 'the kubelet does NOT agree'}"
                                f" ({s['event'] or 'no event yet'})"))
    rows += [("warning", w["detail"]) for w in result["warnings"]]
    rows += [("GAP", g["detail"]) for g in result["gaps"]]
    rows.append(("verdict", f"{len(result['gaps'])} gap(s)" if result["gaps"] else "no gap: written is loaded is scheduled"))
    width = max(len(k) for k, _ in rows)
    return [f"{k.ljust(width)}  {v}" for k, v in rows]
