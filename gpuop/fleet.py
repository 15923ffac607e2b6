"""A real node's audit: which containerd serves kubelet, its three views, and the findings.

Plain data in (``facts.fleet.NodeRuntime``'s read, the cluster's objects), plain data out: the
fleet report's entry for one node. Each finding names the views it joins: ``written`` (the
files), ``loaded`` (the daemon, through CRI), ``after-restart`` (the binary's own merge) and
``scheduled`` (the cluster).
"""

import fnmatch
import posixpath
import re

from .cluster import allocatable_count, gpus_asked
from .containerd import analyze_merge, import_globs, parsed_toml, release
from .gaps import gap
from .objects import of_kind, ref
from .regen import regenerated, template_to_edit

TOOLKIT_MARK = "container-toolkit"  # the toolkit DaemonSet's name holds it (GPU Operator's and the lab's)


def written_view(daemon: dict) -> dict:
    """What the daemon's files say: runtimes of its config and of the drop-ins its imports reach,
    which files those are, and the conf.d files beside the config that no import reaches.

        written_view({"config": "/etc/containerd/config.toml", "files": {...}})
        -> {"runtimes": ["runc", "nvidia"], "dropins": ["/etc/containerd/conf.d/99-nvidia.toml"],
            "unreached": [], "errors": []}
    """
    config, files = daemon["config"], daemon["files"]
    if config not in files:
        return {"runtimes": [], "dropins": [], "unreached": [], "errors": [f"{config} is missing or unreadable"]}
    main, error = parsed_toml(config, files[config]["text"])
    if main is None:
        return {"runtimes": [], "dropins": [], "unreached": [], "errors": [error]}
    globs = import_globs(main, config)
    reached = sorted(p for p in files if p != config and any(fnmatch.fnmatchcase(p, g) for g in globs))
    docs, errors = [], []
    for path in reached:
        doc, error = parsed_toml(path, files[path]["text"])
        docs.append(doc) if doc is not None else errors.append(error)
    conf_d = posixpath.join(posixpath.dirname(config), "conf.d")
    unreached = sorted(p for p in files if posixpath.dirname(p) == conf_d and p not in reached)
    return {"runtimes": analyze_merge(main, docs).written, "dropins": reached, "unreached": unreached, "errors": errors,
            "imports": main.get("imports", [])}


def sandbox_error(version: str, handler: str) -> str:
    """What containerd of ``version`` answers kubelet for a sandbox whose handler it does not load
    (kubelet's event: ``Failed to create pod sandbox: rpc error: code = Unknown desc = ...``).

        sandbox_error("1.6.20", "nvidia") -> 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    """
    cause = f'no runtime for "{handler}" is configured'
    if release(version) >= (2,):
        return f'unable to get OCI runtime for sandbox "<id>": {cause}'
    return f"failed to get sandbox runtime: {cause}"


def says_sandbox_error(message: str, version: str, handler: str) -> bool:
    """Whether a kubelet's event message is ``sandbox_error``'s, a sandbox's id where it has one.

        says_sandbox_error('Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get '
                           'sandbox runtime: no runtime for "nvidia" is configured', "1.6.20", "nvidia") -> True
    """
    expected = re.escape(sandbox_error(version, handler)).replace(re.escape("<id>"), "[0-9a-f]{64}")
    return re.search(f"{expected}$", message) is not None


def runtime_view(read: dict) -> dict:
    """One node's containerd, from ``NodeRuntime``'s read: the daemon that is the node's runtime
    (the one the read asked: kubelet's, else the only one, else the one on the default socket),
    its version and three views, and the other daemons.

        runtime_view(read)["cri_after_restart"] -> "ok" | "fails" | "refuses-start" | "unknown"
    """
    endpoint = read["kubelet"]["endpoint"] if read.get("kubelet") else None
    daemon = next((d for d in read["containerds"] if d["serves"]), None)
    others = [{"pid": d["pid"], "config": d["config"], "address": d["address"]}
              for d in read["containerds"] if d is not daemon]
    view = {"kubelet_endpoint": endpoint, "others": others}
    if daemon is None:
        return {**view, "daemon": None, "version": "none", "written": [], "loaded": [], "loaded_from": "none",
                "after_restart": [], "cri_after_restart": "unknown", "restart_reason": ""}
    loaded, restart = daemon["loaded"] or {}, daemon["restart"]
    written = written_view(daemon)
    if not loaded.get("crictl", True):
        loaded_from = "no-crictl"
    else:
        loaded_from = "cri" if loaded.get("cri") == "ok" else "cri-down"
    version = restart["version"] if restart else "unknown"
    regen = regenerated(daemon["config"], daemon["files"], version, daemon.get("nvidia_runtimes", []))
    if regen is not None:  # k3s or RKE2 writes the file anew at start: that file is what loads
        after, reason = regen["runtimes"], regen["reason"]
        cri_after = "unknown" if not regen["known"] else "ok" if regen["default_runtime"] in after else "fails"
        if cri_after == "fails":
            reason += f", whose default_runtime_name {regen['default_runtime']} has no runtime"
    elif restart is None:
        asked = daemon.get("binary") or ""
        reason = (f"{asked} is not there to ask" if asked else
                  f"{daemon['exe']} is not named containerd and has no containerd beside it to ask")
        after, cri_after = [], "unknown"
    else:
        after, reason = restart["runtimes"], restart["reason"]
        cri_after = "refuses-start" if not restart["starts"] else "ok" if restart["cri_ok"] else "fails"
    return {**view, "daemon": {"pid": daemon["pid"], "exe": daemon["exe"], "config": daemon["config"],
                               "address": daemon["address"], "binary": daemon.get("binary") or daemon["exe"]},
            "version": version, "regenerated": regen,
            "written": written["runtimes"], "dropins": written["dropins"], "unreached": written["unreached"],
            "config_errors": written["errors"], "imports": written.get("imports", []),
            "loaded": loaded.get("runtimes", []), "loaded_from": loaded_from, "cri_error": loaded.get("error", ""),
            "default_runtime": loaded.get("default_runtime", ""),
            "cdi": {"enabled": loaded.get("cdi", False), "spec_dirs": loaded.get("cdi_spec_dirs", []),
                    "gpu_specs": daemon.get("gpu_cdi_specs", [])},
            "after_restart": after, "cri_after_restart": cri_after, "restart_reason": reason}


def _ready(pod) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _toolkit_pod(pod) -> bool:
    return any(o.get("kind") == "DaemonSet" and TOOLKIT_MARK in o.get("name", "")
               for o in pod["metadata"].get("ownerReferences") or [])


def api_handlers(node: dict) -> list | None:
    """The handlers the API says the node's runtime loaded: ``Node.status.runtimeHandlers``, which
    kubelet copies from its runtime's CRI status (containerd 2.0+), the default one named "";
    None where the node reports none (containerd 1.x answers none), so only a read of the node
    judges it.

        api_handlers({"status": {"runtimeHandlers": [{"name": ""}, {"name": "runc"}]}}) -> ["", "runc"]
    """
    handlers = (node.get("status") or {}).get("runtimeHandlers")
    return sorted(h.get("name") or "" for h in handlers) if handlers else None


def api_disagrees(node: dict, loaded: list, loaded_from: str, version: str) -> list:
    """The gap where a Node's ``status.runtimeHandlers`` (kubelet's copy of its runtime's CRI
    status) and the daemon's own CRI answer name different handlers; none where the node reports
    no handlers (containerd 1.x) or CRI did not answer.

        api_disagrees(node, ["runc", "nvidia"], "cri", "2.4.2")
        -> [{"kind": "loaded-disagrees-with-api", "subject": "gpu-a", ...}]   # the API says "", runc
    """
    reported, name = api_handlers(node), node["metadata"]["name"]
    if reported is None or loaded_from != "cri" or set(reported) - {""} == set(loaded):
        return []
    return [gap("loaded-disagrees-with-api", name, ["loaded", "scheduled"],
                f"node {name}'s kubelet reports {','.join(h or '(default)' for h in reported)} loaded "
                f"(Node.status.runtimeHandlers), its containerd {version} answers "
                f"{','.join(loaded) or 'none'} through CRI")]


def api_view(node: dict) -> dict | None:
    """A node judged from the API alone, where the node itself was not read: "loaded" is what its
    kubelet reports (``api_handlers``), the other views unknown; None where it reports none.

        api_view({"metadata": {"name": "gpu-a"}, "status": {"runtimeHandlers": [{"name": ""}, {"name": "runc"}]}})
        -> {"loaded": ["runc"], "loaded_from": "api", "daemon": None, ...}
    """
    handlers = api_handlers(node)
    if handlers is None:
        return None
    return {"kubelet_endpoint": None, "others": [], "daemon": None, "version": "unknown", "written": [],
            "dropins": [], "unreached": [], "config_errors": [], "imports": [], "regenerated": None,
            "loaded": [h for h in handlers if h], "loaded_from": "api", "cri_error": "", "default_runtime": "",
            "cdi": None, "after_restart": [], "cri_after_restart": "unknown", "restart_reason": ""}


def node_findings(name: str, runtime: dict, objects: list, gpu_handler: str = "nvidia") -> list:
    """The gaps of one node, each with the views it joins.

    + name: the node's name in the cluster
    + runtime: ``runtime_view``'s answer
    + objects: the cluster's Nodes, RuntimeClasses and Pods (plain JSON, as the API gives them)
    + gpu_handler: the runtime handler GPU Pods need

        node_findings("gpu-a", runtime_view(read), objects)
        -> [{"kind": "sandbox-fails", "views": ["scheduled", "loaded"], "detail": "..."}, ...]
    """
    gaps, version = [], runtime["version"]
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == name), None)
    if node is None:
        gaps.append(gap("no-node-object", name, ["scheduled"],
                         f"no Node named {name} in the cluster: set node_name for this host"))
    from_api = runtime["loaded_from"] == "api"
    if runtime["daemon"] is None and not from_api:
        if runtime["kubelet_endpoint"]:
            where = f" on kubelet's endpoint {runtime['kubelet_endpoint']}"
        elif runtime["others"]:
            where = " on the default socket, and no kubelet runs to say which of its containerds serves"
        else:
            where = ""
        gaps.append(gap("no-containerd", name, ["loaded"], f"no containerd runs{where}: no Pod can start on this node"))
        return gaps
    d = runtime["daemon"]
    for other in runtime["others"]:
        gaps.append(gap("second-containerd", str(other["pid"]), ["loaded"],
                         f"a second containerd runs (pid {other['pid']}, config {other['config']}, socket "
                         f"{other['address']}); the audited one is pid {d['pid']} on {d['address']}"
                         + (", kubelet's endpoint" if runtime["kubelet_endpoint"] else "")))
    gaps += [gap("config-unreadable", d["config"], ["written"], e) for e in runtime["config_errors"]]
    for path in runtime["unreached"]:
        gaps.append(gap("dropin-not-imported", path, ["written"],
                         f"{path} is in conf.d but no imports glob of {d['config']} reaches it "
                         f"(imports: {', '.join(runtime['imports']) or 'none'}): containerd never reads it"))
    down = runtime["loaded_from"] == "cri-down"
    if down:
        gaps.append(gap("cri-down", d["address"], ["loaded"], f"containerd {version} runs but its CRI does not answer "
                                                 f"({runtime['cri_error']}): no Pod can start on this node"))
    for handler in runtime["written"]:
        if runtime["loaded_from"] == "cri" and handler not in runtime["loaded"]:
            gaps.append(gap("handler-not-loaded", handler, ["written", "loaded"],
                             f"runtime handler {handler} is written but containerd {version} does not load it"))
    regen = runtime.get("regenerated")
    if regen and regen["known"]:
        for handler in runtime["written"]:
            if handler not in regen["runtimes"]:
                gaps.append(gap("lost-at-regeneration", handler, ["written", "after-restart"],
                                f"runtime handler {handler} is written in {d['config']} (or a file its imports "
                                f"reach), which {regen['by']} writes anew at its next start from "
                                f"{regen['source']}, and that does not define it: the next start loses it. "
                                f"Define it in {template_to_edit(d['config'], version, regen)}"))
    if runtime["cri_after_restart"] == "refuses-start":
        gaps.append(gap("restart-refuses-start", d["exe"], ["after-restart"], runtime["restart_reason"]))
    elif runtime["cri_after_restart"] == "fails":
        gaps.append(gap("restart-takes-cri-down", d["exe"], ["after-restart"],
                         f"a restart of containerd {version} takes CRI down: {runtime['restart_reason']}"))
    if node is None:
        return gaps
    gaps += api_disagrees(node, runtime["loaded"], runtime["loaded_from"], version)

    knows = runtime["loaded_from"] in ("cri", "cri-down", "api")
    handlers = {rc["metadata"]["name"]: rc.get("handler") for rc in of_kind(objects, "RuntimeClass")}
    restart_ok = runtime["cri_after_restart"] == "ok"
    for pod in of_kind(objects, "Pod"):
        if pod["spec"].get("nodeName") != name or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        rc = pod["spec"].get("runtimeClassName")
        handler = handlers.get(rc, rc) if rc else None
        if handler is None:
            continue
        if knows and handler not in runtime["loaded"]:
            why = ("its CRI is down" if down else
                   f"its kubelet reports only {','.join(runtime['loaded']) or 'none'} loaded "
                   "(Node.status.runtimeHandlers; the node itself was not read)" if from_api else
                   f"containerd says: {sandbox_error(version, handler)}")
            gaps.append(gap("sandbox-fails", ref(pod), ["scheduled", "loaded"],
                             f"Pod {ref(pod)} (RuntimeClass {rc}, handler {handler}) cannot start a "
                             f"sandbox: {why}"))
        elif knows and not from_api and (not restart_ok or handler not in runtime["after_restart"]):
            gaps.append(gap("handler-gone-after-restart", ref(pod), ["scheduled", "after-restart"],
                             f"Pod {ref(pod)} (handler {handler}) runs now, but after a restart "
                             + (f"CRI is {runtime['cri_after_restart']}" if not restart_ok
                                else f"containerd loads only {','.join(runtime['after_restart']) or 'nothing'}")))
    if runtime["loaded_from"] == "cri":
        gaps += _gpu_pods_without_a_class(name, runtime, objects, gpu_handler)
    if knows and gpu_handler not in runtime["loaded"]:
        gpus = allocatable_count(node)
        if gpus:
            gaps.append(gap("gpu-advertised-not-loaded", name, ["scheduled", "loaded"],
                             f"node {name} advertises {gpus} nvidia.com/gpu but its containerd does not "
                             f"load {gpu_handler}"))
        for pod in of_kind(objects, "Pod"):
            if pod["spec"].get("nodeName") == name and _toolkit_pod(pod) and _ready(pod):
                gaps.append(gap("toolkit-ready-not-loaded", ref(pod), ["scheduled", "loaded"],
                                 f"toolkit Pod {ref(pod)} is Ready on {name} while containerd does not "
                                 f"load {gpu_handler}: Ready says the toolkit wrote its drop-in, not that "
                                 "anything loaded it"))
    return gaps


def _gpu_pods_without_a_class(name: str, runtime: dict, objects: list, gpu_handler: str) -> list:
    """GPU Pods with no RuntimeClass (the GPU Operator's CDI mode, and any Pod that trusts the
    node's default): each gets its GPU from the default runtime when that is ``gpu_handler``,
    else only through CDI, which needs CDI on in the daemon and a spec of nvidia.com/gpu devices
    in the directories it reads. Either missing is a gap naming the Pod."""
    gaps, cdi, version = [], runtime["cdi"], runtime["version"]
    default = runtime["default_runtime"] or "runc"
    if default == gpu_handler:
        return gaps
    for pod in of_kind(objects, "Pod"):
        if (pod["spec"].get("nodeName") != name or pod["spec"].get("runtimeClassName")
                or pod["status"].get("phase") in ("Succeeded", "Failed")):
            continue
        gpus = gpus_asked(pod)
        if not gpus:
            continue
        asks = f"Pod {ref(pod)} asks for {gpus} nvidia.com/gpu with no RuntimeClass"
        if not cdi["enabled"]:
            what = ("drops the Pod's CDI device request silently: it starts without a GPU" if release(version) < (2,)
                    else "refuses the Pod's CDI device request" if release(version) >= (2, 3)
                    else "does not resolve the Pod's CDI device request")
            gaps.append(gap("gpu-pod-cdi-off", ref(pod), ["scheduled", "loaded"],
                            f"{asks}: containerd {version} runs it with its default runtime {default}, and "
                            f"CDI is off (enable_cdi), so it {what}"))
        elif not cdi["gpu_specs"]:
            gaps.append(gap("cdi-spec-missing", ref(pod), ["scheduled", "loaded"],
                            f"{asks}: CDI is on in containerd {version}, but no spec of nvidia.com/gpu "
                            f"devices is in {', '.join(cdi['spec_dirs']) or 'its spec directories'}: "
                            "its device request cannot be resolved"))
    return gaps


AT_RISK = ("sandbox-fails", "handler-gone-after-restart", "gpu-pod-cdi-off", "cdi-spec-missing")


def pods_at_risk(gaps: list) -> int:
    """How many Pods a node's gaps name (cannot start, will not after a restart, or run without
    their GPU)."""
    return len({g["subject"] for g in gaps if g["kind"] in AT_RISK})


def fleet_gaps(nodes: dict, objects: list) -> list:
    """Gaps of the fleet as a whole: RuntimeClasses whose handler no audited node loads.

        fleet_gaps({"gpu-a": {"loaded": ["runc"], ...}}, objects)
        -> [{"kind": "runtimeclass-handler-nowhere", ...}]
    """
    loaded = {h for n in nodes.values() for h in n["loaded"]}
    return [gap("runtimeclass-handler-nowhere", rc["metadata"]["name"], ["scheduled", "loaded"],
                 f"RuntimeClass {rc['metadata']['name']}: no audited node loads its handler {rc.get('handler')}")
            for rc in of_kind(objects, "RuntimeClass") if rc.get("handler") not in loaded]


def node_entry(name: str, runtime: dict, gaps: list, node: dict | None = None) -> dict:
    """One node of the fleet report (the JSON's ``nodes.<name>``); ``runtime_handlers`` is the
    API's view of what is loaded (``api_handlers`` of its Node), beside the node's own."""
    return {"runtime_handlers": api_handlers(node) if node else None, "version": runtime["version"], "daemon": runtime["daemon"], "loaded": runtime["loaded"],
            "loaded_from": runtime["loaded_from"], "written": runtime["written"],
            "default_runtime": runtime.get("default_runtime", ""), "cdi": runtime.get("cdi"),
            "after_restart": runtime["after_restart"], "cri_after_restart": runtime["cri_after_restart"],
            "regenerated_by": (runtime.get("regenerated") or {}).get("by"),
            "regenerated_from": (runtime.get("regenerated") or {}).get("template"),
            "kubelet_endpoint": runtime["kubelet_endpoint"], "pods_at_risk": pods_at_risk(gaps),
            "gaps": gaps}


def fleet_table(report: dict) -> list:
    """The fleet as a table, one line per node, then every gap.

        fleet_table({"nodes": {"gpu-a": {...}}, "gaps": []})
        -> ["NODE   VERSION  LOADED  AFTER RESTART  CRI AFTER RESTART  PODS AT RISK  GAPS", ...]
    """
    head = ("NODE", "VERSION", "LOADED", "AFTER RESTART", "CRI AFTER RESTART", "PODS AT RISK", "GAPS")
    def loaded(n):  # what CRI answered; what the kubelet reports where the node was not read; else why not
        handlers = ",".join(n["loaded"]) or "-"
        return {"cri": handlers, "api": f"{handlers} (api)"}.get(n["loaded_from"], n["loaded_from"])

    rows = [head] + [(name, n["version"], loaded(n), ",".join(n["after_restart"]) or "-", n["cri_after_restart"],
                      str(n["pods_at_risk"]), str(len(n["gaps"])))
                     for name, n in sorted(report["nodes"].items())]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += [f"GAP {name}: [{g['kind']}] {g['detail']}" for name, n in sorted(report["nodes"].items())
              for g in n["gaps"]]
    lines += [f"GAP fleet: [{g['kind']}] {g['detail']}" for g in report["gaps"]]
    total = sum(len(n["gaps"]) for n in report["nodes"].values()) + len(report["gaps"])
    lines.append(f"{total} gap(s) on {len(report['nodes'])} node(s)" if total
                 else f"no gap on {len(report['nodes'])} node(s): written is loaded is scheduled")
    return lines
