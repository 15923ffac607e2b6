"""A real node's repair, planned from its one judgment (``gpuop.view``, ``gpuop.rules``): which
file changes and how, whether containerd must restart, which Pods a drain would evict, which
would stop it, and why. Pure: a node's read and the cluster's objects in, a plan out.

A node is repaired when the GPU handler is missing now or after a restart (not loaded, dropped by
a restart, or a restart that would not bring CRI up) and the node is meant to hold it: its files
write it, or a Pod bound to it asks for it. A node whose GPUs come by CDI and whose Pods ask no
handler needs nothing, and a healthy node is never touched.
"""

import difflib
import posixpath

import tomli_w

from .containerd import dropin_keeping_cri, nvidia_dropin, parsed_toml, release, runtime_names, systemd_cgroup
from .objects import of_kind, ref
from .rules import active, classed_pods

CORDONED_BY = "gpuop.io/cordoned-by"  # on a Node gpuop cordoned: only such a node is uncordoned by gpuop
REPAIR_FAILED = "gpuop.io/repair-failed"  # on a Node left cordoned: the step and what was seen
DROPIN_NAME = "99-nvidia.toml"  # where gpuop writes the handler when no file of the imports' reach has it


def handler_dropin(version: str, main_doc: dict, handler: str) -> dict:
    """The drop-in that gives ``handler`` to this containerd, in its root config's version and
    layout: 1.x carries the root's CRI section whole (its merge replaces plugin sections), 2.x
    the handler alone, in the version-3 layout where the root is version 3 or more (a drop-in
    above the root's version is what 2.3.0-2.3.4 refuse to start on).

        handler_dropin("2.4.2", {"version": 3}, "nvidia")["version"] -> 3
    """
    dropin = nvidia_dropin(systemd=systemd_cgroup(main_doc))
    cri = next(iter(dropin["plugins"]))
    runtime = dropin["plugins"][cri]["containerd"]["runtimes"].pop("nvidia")
    dropin["plugins"][cri]["containerd"]["runtimes"][handler] = runtime
    root_version = main_doc.get("version", 1)
    if release(version) < (2,):
        return dropin_keeping_cri(main_doc, dropin)
    if root_version >= 3:
        return {"version": root_version,
                "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {handler: runtime}}}}}
    return dropin


def drainable(pod: dict) -> str:
    """How a drain treats a Pod on the node: ``stays`` (a DaemonSet's, a mirror Pod, ended),
    ``evict`` (a controller owns it: it comes back elsewhere), ``unmanaged`` (nothing brings it
    back: it stops the drain unless told to delete it), as ``kubectl drain`` treats them.

        drainable({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "controller": True}]}, ...}) -> "evict"
    """
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}) or not active(pod):
        return "stays"
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return "stays"
    return "evict" if owners else "unmanaged"


def diff(path: str, before: str | None, after: str) -> list:
    """A unified diff of a file's change, as lines."""
    return list(difflib.unified_diff((before or "").splitlines(), after.splitlines(),
                                     f"{path} (now)" if before is not None else "/dev/null", f"{path} (repaired)",
                                     lineterm=""))


def plan_node(name: str, read: dict, view: dict, objects: list, gpu_handler: str) -> dict:
    """What repairing node ``name`` takes, from its read (``facts.node.NodeRuntime``) and view.

        plan_node("gpu-a", read, node_view(read), objects, "nvidia")
        -> {"node": "gpu-a", "action": "repair", "why": "...", "file": {...}, "restart": True,
            "evict": ["ml/train-0"], "unmanaged": [], "stays": ["gpu-operator/toolkit-x"]}

    ``action``: ``none`` (healthy, or no GPU handler meant here), ``repair``, or ``blocked`` (what
    gpuop cannot repair here, said in ``why``).
    """
    pods = [p for p in of_kind(objects, "Pod") if p["spec"].get("nodeName") == name]
    asking = [ref(p) for p, _, handler in classed_pods(name, objects) if handler == gpu_handler]
    meant = gpu_handler in view["written"] or bool(asking)
    loaded_now = view["loaded_from"] == "cri" and gpu_handler in view["loaded"]
    after_ok = view["cri_after_restart"] == "ok" and gpu_handler in view["after_restart"]
    plan = {"node": name, "action": "none", "why": "", "file": None, "restart": False,
            "evict": sorted(ref(p) for p in pods if drainable(p) == "evict"),
            "unmanaged": sorted(ref(p) for p in pods if drainable(p) == "unmanaged"),
            "stays": sorted(ref(p) for p in pods if drainable(p) == "stays"),
            "version": view["version"], "asking": sorted(asking)}
    if not meant:
        return {**plan, "why": f"no file writes {gpu_handler} and no Pod asks it: nothing to repair"}
    if loaded_now and after_ok:
        return {**plan, "why": f"{gpu_handler} is loaded now and after a restart"}
    if view["loaded_from"] not in ("cri", "cri-down") or view["cri_after_restart"] == "unknown":
        return {**plan, "action": "blocked", "why": f"the node was not read whole (loaded from {view['loaded_from']}, "
                                                      f"after a restart {view['cri_after_restart']}): nothing is planned blind"}
    if view.get("regenerated"):
        return {**plan, "action": "blocked", "why": f"{view['regenerated']['by']} writes the config anew at its start: "
                                                      f"its template {view['regenerated']['template']} is the file to change "
                                                      "(not repaired by gpuop yet)"}
    if after_ok:  # the files are right; only the daemon is behind them
        return {**plan, "action": "repair", "restart": True,
                "why": f"{gpu_handler} is written and a restart loads it with CRI up; the running daemon does not hold it"}
    daemon = next((d for d in read["containerds"] if d["serves"]), None)
    config = daemon["config"] if daemon else ""
    main_doc, error = parsed_toml(config, daemon["files"][config]["text"]) if daemon and config in daemon["files"] else (None, "")
    if main_doc is None:
        return {**plan, "action": "blocked", "why": f"its config {config or '(none)'} cannot be read: {error or 'missing'}"}
    globs = [g if g.startswith("/") else posixpath.join(posixpath.dirname(config), g) for g in main_doc.get("imports", [])]
    holder = next((p for p in view["dropins"] if gpu_handler in _runtimes(daemon["files"][p]["text"])), None)
    target = holder or next((posixpath.join(posixpath.dirname(g), DROPIN_NAME) for g in globs
                             if posixpath.basename(g) in ("*.toml", "*")), None)
    if target is None:
        return {**plan, "action": "blocked", "why": f"{config} imports no drop-in directory ({globs or 'no imports'}): "
                                                      "adding one is not done by gpuop yet"}
    after = tomli_w.dumps(handler_dropin(view["version"], main_doc, gpu_handler))
    before = daemon["files"].get(target, {}).get("text")
    why = (f"a restart {'would not start containerd' if view['cri_after_restart'] == 'refuses-start' else 'takes CRI down' if view['cri_after_restart'] != 'ok' else f'does not load {gpu_handler}'}"
           f" ({view.get('restart_reason') or 'its own merge of the files'}): {target} is rewritten for containerd "
           f"{view['version']}, then restarted once its own merge says CRI comes up with {gpu_handler}")
    return {**plan, "action": "repair", "restart": True, "why": why,
            "file": {"path": target, "before": before, "after": after, "diff": diff(target, before, after)}}


def _runtimes(text: str) -> list:
    doc, _ = parsed_toml("", text)
    return runtime_names(doc) if doc else []


def plan_lines(plan: dict) -> list:
    """The plan of one node in words, its diff included: what ``--dry`` prints.

        plan_lines({"node": "gpu-a", "action": "none", "why": "nvidia is loaded ...", ...})
        -> ["gpu-a: nothing to do: nvidia is loaded now and after a restart"]
    """
    name = plan["node"]
    if plan["action"] == "none":
        return [f"{name}: nothing to do: {plan['why']}"]
    if plan["action"] == "blocked":
        return [f"{name}: NOT repaired: {plan['why']}"]
    lines = [f"{name}: repair: {plan['why']}",
             f"{name}:   cordon, then drain: evict {', '.join(plan['evict']) or 'nothing'}"
             + (f"; Pods no controller owns stop the drain: {', '.join(plan['unmanaged'])}" if plan["unmanaged"] else "")]
    if plan["file"]:
        lines += [f"{name}:   write {plan['file']['path']} (the file before kept beside it):"]
        lines += [f"{name}:     {line}" for line in plan["file"]["diff"]]
    lines.append(f"{name}:   restart containerd {plan['version']}, prove it (CRI, kubelet Ready, a probe Pod), uncordon")
    return lines
