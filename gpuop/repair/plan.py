"""A real node's repair, planned from its one judgment (``gpuop.judgment.view``, ``gpuop.judgment.rules``): which
files change and how, whether containerd must restart, which Pods a drain would evict, which
would stop it, and why. Pure: a node's read and the cluster's objects in, a plan out.

The file, per kind of node: the drop-in the imports reach (the node's own nvidia-ctk's on 2.x,
where the root's version takes it; else gpuop's, in the node's containerd's layout), with an
import added to a root config that reaches no place for it; on k3s and RKE2 the template they
render the config from, never the config they write anew. On CRI-O, the toolkit's drop-in in its
``crio.conf.d`` (``nvidia-ctk runtime configure --runtime=crio``), then a restart: a reload
(SIGHUP) shows the new runtime in CRI-O's status but not to its sandboxes (cri-o#10202).

A node is repaired when the GPU handler is missing now or after a restart (not loaded, dropped by
a restart, or a restart that would not bring CRI up) and the node is meant to hold it: its files
write it, or a Pod bound to it asks for it. A node whose GPUs come by CDI and whose Pods ask no
handler needs nothing, and a healthy node is never touched.
"""

import difflib
import json
import posixpath
import re

import tomli_w

from gpuop.judgment import crio
from gpuop.judgment.cluster import classed_pods
from gpuop.judgment.configs import nvidia_dropin, repaired_dropin, systemd_cgroup
from gpuop.judgment.containerd import CRI_PLUGIN, import_globs, parsed_toml, release, runtime_names
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.regen import V3_TEMPLATE, template_path
from gpuop.judgment.view import LIVE
from gpuop.knobs import DrainPolicy
from gpuop.layout import NODE_BACKUPS
from gpuop.repair.pods import drainable, local_storage

CORDONED_BY = "gpuop.io/cordoned-by"  # on a Node gpuop cordoned: only such a node is uncordoned by gpuop
REPAIR_FAILED = "gpuop.io/repair-failed"  # on a Node left cordoned: the step and what was seen
DROPIN_NAME = "99-nvidia.toml"  # where gpuop writes the handler when no file of the imports' reach has it


def diff(path: str, before: str | None, after: str) -> list:
    """A unified diff of a file's change, as lines."""
    return list(
        difflib.unified_diff(
            (before or "").splitlines(),
            after.splitlines(),
            f"{path} (now)" if before is not None else "/dev/null",
            f"{path} (repaired)",
            lineterm="",
        )
    )


def plan_node(
    name: str, read: dict, view: dict, gaps: list, objects: list, gpu_handler: str, toolkit: dict | None = None
) -> dict:
    """What repairing node ``name`` takes, from its read (``runbook.reach.node.NodeRuntime``), view and
    gaps (``gpuop.judgment.rules.judge``: the plan decides nothing the judgment did not find).

        plan_node("gpu-a", read, view, judge(view, objects, "gpu-a")["gaps"], objects, "nvidia")
        -> {"node": "gpu-a", "action": "repair", "why": "...", "files": [{...}], "restart": True,
            "evict": ["ml/train-0"], "unmanaged": [], "stays": ["gpu-operator/toolkit-x"]}

    ``action``: ``none`` (healthy, or no GPU handler meant here), ``repair``, or ``blocked`` (what
    gpuop cannot repair here, said in ``why``). ``files``: each file that changes (``path``,
    ``before``, ``after``, ``diff``, ``by``), the root config first where an import must be added.
    ``toolkit``: the node's nvidia-ctk and the drop-in it would write (``runbook.reach.node.ToolkitDropin``):
    on containerd 2.x its drop-in is the one written, where it is in a version the root's takes.
    """
    pods = [p for p in of_kind(objects, "Pod") if p["spec"].get("nodeName") == name]
    asking = [ref(p) for p, _, handler in classed_pods(name, objects) if handler == gpu_handler]
    meant = gpu_handler in view["written"] or bool(asking)
    refused = sorted(g["subject"] for g in gaps if g["kind"] == "sandbox-refuses-loaded" and g["subject"] in asking)
    loaded_now = view["loaded_from"] in LIVE and gpu_handler in view["loaded"] and not refused
    behind = (
        f"the running daemon's status names it, its sandboxes refuse it ({', '.join(refused)})"
        if refused
        else "the running daemon does not hold it"
    )
    after_ok = view["cri_after_restart"] == "ok" and gpu_handler in view["after_restart"]
    plan = {
        "node": name,
        "action": "none",
        "why": "",
        "files": [],
        "restart": False,
        **_drain_lists(pods),
        "runtime": view["runtime"],
        "version": view["version"],
        "asking": sorted(asking),
    }
    if not meant:
        return {**plan, "why": f"no file writes {gpu_handler} and no Pod asks it: nothing to repair"}
    if loaded_now and after_ok:
        return {**plan, "why": f"{gpu_handler} is loaded now and after a restart"}
    if view["runtime"] == crio.NAME:
        return {**plan, **_crio_repair(read, view, gpu_handler, toolkit, behind)}
    if view["loaded_from"] not in ("cri", "cri-down") or view["cri_after_restart"] == "unknown":
        return {
            **plan,
            "action": "blocked",
            "why": f"the node was not read whole (loaded from {view['loaded_from']}, "
            f"after a restart {view['cri_after_restart']}): nothing is planned blind",
        }
    if after_ok:  # the files are right; only the daemon is behind them
        why = f"{gpu_handler} is written and a restart loads it with CRI up; {behind}"
        return {**plan, "action": "repair", "restart": True, "why": why}
    daemon = next((d for d in read["containerds"] if d["serves"]), None)
    if view.get("regenerated"):
        return {**plan, **_template_repair(daemon, view, gpu_handler)}
    return {**plan, **_containerd_repair(daemon, view, gpu_handler, toolkit)}


def _drain_lists(pods: list) -> dict:
    """The node's Pods as its drain takes them: evicted, unmanaged (deleted only when told), those
    with emptyDir data, and those that stay (``drainable``)."""
    return {
        "evict": sorted(ref(p) for p in pods if drainable(p) == "evict"),
        "unmanaged": sorted(ref(p) for p in pods if drainable(p) == "unmanaged"),
        "local_storage": sorted(
            f"{ref(p)} (emptyDir {', '.join(local_storage(p))})"
            for p in pods
            if drainable(p) != "stays" and local_storage(p)
        ),
        "stays": sorted(ref(p) for p in pods if drainable(p) == "stays"),
    }


def _containerd_repair(daemon: dict | None, view: dict, gpu_handler: str, toolkit: dict | None) -> dict:
    """A containerd node whose files do not give ``gpu_handler`` after a restart: the drop-in that
    does (``_dropin_by``: nvidia-ctk's where the root takes it, else gpuop's), an import of its
    directory where the root's reach none, then one restart; blocked where the root config cannot
    be read or has no imports."""
    config = daemon["config"] if daemon else ""
    main_doc, error = (
        parsed_toml(config, daemon["files"][config]["text"]) if daemon and config in daemon["files"] else (None, "")
    )
    if main_doc is None:
        return {"action": "blocked", "why": f"its config {config or '(none)'} cannot be read: {error or 'missing'}"}
    holding = [p for p in view["dropins"] if gpu_handler in _runtimes(daemon["files"][p]["text"])]
    target, imported = dropin_target(config, main_doc, view["dropins"], holding)
    if target is None:
        why = (
            f"{config} is a version-{main_doc.get('version', 1)} config, which has no "
            "imports: its handler would have to be written into it (not done by gpuop)"
        )
        return {"action": "blocked", "why": why}
    by, after = _dropin_by(view["version"], main_doc, target, gpu_handler, toolkit)
    files = [_change(target, daemon["files"].get(target, {}).get("text"), after, by)]
    if not imported:  # the root's imports reach no place for it: one line added, nothing else of it touched
        text = daemon["files"][config]["text"]
        added = with_import(text, posixpath.join(posixpath.dirname(target), "*.toml"))
        mode = daemon["files"][config].get("mode", "644")
        files.insert(0, _change(config, text, added, "gpuop (an import of the drop-in's directory)", mode))
    why = (
        f"a restart {_restart_harm(view, gpu_handler)}"
        f" ({view.get('restart_reason') or 'its own merge of the files'}): {target} is written for containerd "
        f"{view['version']}, then restarted once its own merge says CRI comes up with {gpu_handler}"
    )
    return {"action": "repair", "restart": True, "why": why, "files": files}


def _dropin_by(version: str, main_doc: dict, target: str, gpu_handler: str, toolkit: dict | None) -> tuple:
    """Who writes the drop-in and its text: on containerd 2.x nvidia-ctk's own (``toolkit``) where
    it defines ``gpu_handler`` in a version the root's takes, else gpuop's (``repaired_dropin``), the
    reason said in ``by``.

        _dropin_by("2.4.2", root, "/etc/containerd/conf.d/99-nvidia.toml", "nvidia", toolkit)
        -> ("nvidia-ctk 1.18.1 (/usr/bin/nvidia-ctk)", 'version = 3\n...')
    """
    ours = tomli_w.dumps(repaired_dropin(version, main_doc, gpu_handler))
    if not (toolkit and release(version) >= (2,) and toolkit.get("dropin")):
        return "gpuop", ours
    doc, _ = parsed_toml(target, toolkit["dropin"])
    root = main_doc.get("version", 1)
    if doc and gpu_handler in runtime_names(doc) and doc.get("version", 1) <= root:
        return f"nvidia-ctk {toolkit['version']} ({toolkit['path']})", toolkit["dropin"]
    # the toolkit's drop-in would be refused by some containerd (2.3.0-2.3.4 refuse one above the root)
    theirs = (doc or {}).get("version", "?")
    return f"gpuop, not nvidia-ctk {toolkit['version']} (its drop-in is version {theirs}, the root's {root})", ours


def _restart_harm(view: dict, gpu_handler: str) -> str:
    """What a restart does to a node the repair takes, in words: ``"takes CRI down"``."""
    if view["cri_after_restart"] == "refuses-start":
        return "would not start containerd"
    return "takes CRI down" if view["cri_after_restart"] != "ok" else f"does not load {gpu_handler}"


def _crio_repair(read: dict, view: dict, gpu_handler: str, toolkit: dict | None, behind: str) -> dict:
    """A handler CRI-O's files give and its own merge keeps needs a restart only; else the
    toolkit's drop-in (gpuop's, of the same table, where the node has no nvidia-ctk) goes into its
    ``crio.conf.d``, then the restart. A handler its merge drops (its binary missing) or a config
    it refuses is not gpuop's to fix: blocked, in CRI-O's words."""
    if view["loaded_from"] not in LIVE or view["cri_after_restart"] == "unknown":
        return {
            "action": "blocked",
            "why": f"the node was not read whole (loaded from {view['loaded_from']}, "
            f"after a restart {view['cri_after_restart']}): nothing is planned blind",
        }
    restart = f"a restart of cri-o {view['version']}"
    if view["cri_after_restart"] == "ok" and gpu_handler in view["after_restart"]:
        return {
            "action": "repair",
            "restart": True,
            "why": f"{gpu_handler} is written and {restart} loads it (its own merge of the files); {behind}",
        }
    if view["cri_after_restart"] != "ok" or gpu_handler in view["written"]:
        return {
            "action": "blocked",
            "why": f"{restart} would not load {gpu_handler}: "
            f"{view.get('restart_reason') or 'its own merge leaves it out'}; not gpuop's to fix",
        }
    daemon = next(d for d in read["crios"] if d["serves"])
    target = posixpath.join(daemon["config_dir"], DROPIN_NAME)
    table = {
        "runtime_path": nvidia_dropin()["plugins"][CRI_PLUGIN]["containerd"]["runtimes"]["nvidia"]["options"][
            "BinaryName"
        ],
        "runtime_type": "oci",
    }
    by, after = (
        "gpuop (nvidia-ctk's table: the node has no nvidia-ctk)",
        tomli_w.dumps({"crio": {"runtime": {"runtimes": {gpu_handler: table}}}}),
    )
    if toolkit and toolkit.get("dropin"):
        doc, _ = parsed_toml(target, toolkit["dropin"])
        if doc and gpu_handler in crio.runtimes_of(doc)[0]:
            by, after = f"nvidia-ctk {toolkit['version']} ({toolkit['path']})", toolkit["dropin"]
    return {
        "action": "repair",
        "restart": True,
        "files": [_change(target, daemon["files"].get(target, {}).get("text"), after, by)],
        "why": f"no file gives {gpu_handler}: {target} is written, then {restart} once its own merge says it loads "
        f"{gpu_handler}",
    }


def _template_repair(daemon: dict, view: dict, gpu_handler: str) -> dict:
    """k3s and RKE2 write the config anew at every start: the handler goes into the template they
    render it from (a new one extends their built-in one), never into the file they rewrite."""
    regen, config = view["regenerated"], daemon["config"]
    if not regen["known"]:
        return {"action": "blocked", "why": regen["reason"]}
    path = template_path(config, view["version"], regen)
    before = daemon["files"].get(path, {}).get("text")
    main_doc, _ = parsed_toml(config, daemon["files"].get(config, {}).get("text", ""))
    dropin = nvidia_dropin(systemd=systemd_cgroup(main_doc or {}))
    runtime = dropin["plugins"][CRI_PLUGIN]["containerd"]["runtimes"]["nvidia"]
    plugin = "io.containerd.cri.v1.runtime" if posixpath.basename(path) == V3_TEMPLATE else CRI_PLUGIN
    table = tomli_w.dumps({"plugins": {plugin: {"containerd": {"runtimes": {gpu_handler: runtime}}}}})
    start = (before.rstrip("\n") + "\n\n") if before else '{{ template "base" . }}\n\n'
    by = f"gpuop (the template {regen['by']} renders {config} from at its start; {config} itself is never written)"
    return {
        "action": "repair",
        "restart": True,
        "files": [_change(path, before, start + table, by)],
        "why": f"{regen['reason']}, without {gpu_handler}: {path} gets it, then {regen['by']} is restarted "
        f"once the template says its next config holds {gpu_handler}",
    }


def dropin_target(config: str, main_doc: dict, dropins: list, holders: list) -> tuple:
    """Where the handler's drop-in goes, and whether the root's imports reach it already: the
    drop-in that defines the handler now, else ``99-nvidia.toml`` in a directory an import
    reaches (``dir/*.toml`` or ``dir/*``) or a single file an import names, else ``conf.d`` beside
    the config, which an import then has to reach; a version-1 config has no imports: None.

        dropin_target("/etc/containerd/config.toml", {"version": 2}, [], [])
        -> ("/etc/containerd/conf.d/99-nvidia.toml", False)
    """
    globs = import_globs(main_doc, config)
    if holders:
        return holders[0], True
    for glob in globs:
        if posixpath.basename(glob) in ("*.toml", "*"):
            return posixpath.join(posixpath.dirname(glob), DROPIN_NAME), True
        if not any(c in glob for c in "*?[") and glob not in dropins:  # named, and not there yet
            return glob, True
    if main_doc.get("version", 1) < 2:
        return None, False
    return posixpath.join(posixpath.dirname(config), "conf.d", DROPIN_NAME), False


def with_import(text: str, glob: str) -> str:
    """The root config's text with ``glob`` imported: into its ``imports`` where it has one
    (rewritten in place, on one line), else a line of its own after ``version`` (a top-level key
    must come before the first table). Every other line stays as it is.

        with_import('version = 2\n[plugins]\n', "/etc/containerd/conf.d/*.toml")
        -> 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n[plugins]\n'
    """
    lines = text.splitlines(keepends=True)
    doc, _ = parsed_toml("", text)
    entries = list((doc or {}).get("imports", [])) + [glob]
    line = f"imports = [{', '.join(json.dumps(e) for e in entries)}]\n"  # a JSON string is a TOML basic string
    top = next((i for i, x in enumerate(lines) if x.lstrip().startswith("[")), len(lines))
    at = next((i for i in range(top) if re.match(r"\s*imports\s*=", lines[i])), None)
    if at is not None:  # an array over several lines ends at its closing bracket
        end = next(i for i in range(at, top) if "]" in lines[i].split("#", 1)[0])
        return "".join(lines[:at] + [line] + lines[end + 1 :])
    version = next((i for i in range(top) if re.match(r"\s*version\s*=", lines[i])), None)
    at = version + 1 if version is not None else 0
    return "".join(lines[:at] + [line] + lines[at:])


def _change(path: str, before: str | None, after: str, by: str, mode: str = "644") -> dict:
    return {"path": path, "before": before, "after": after, "by": by, "mode": mode, "diff": diff(path, before, after)}


def _runtimes(text: str) -> list:
    doc, _ = parsed_toml("", text)
    return runtime_names(doc) if doc else []


def plan_lines(plan: dict, policy: DrainPolicy = DrainPolicy()) -> list:
    """The plan of one node in words, its diff included: what ``--dry`` prints; the drain as its
    ``policy`` makes it (the knobs ``drain``, ``drain_unmanaged``, ``drain_delete_emptydir_data``).

        plan_lines({"node": "gpu-a", "action": "none", "why": "nvidia is loaded ...", ...})
        -> ["gpu-a: nothing to do: nvidia is loaded now and after a restart"]
    """
    name = plan["node"]
    if plan["action"] == "none":
        return [f"{name}: nothing to do: {plan['why']}"]
    if plan["action"] == "blocked":
        return [f"{name}: NOT repaired: {plan['why']}"]
    unmanaged, local = ", ".join(plan["unmanaged"]), ", ".join(plan["local_storage"])
    if not policy.drain:
        drained = f"{name}:   cordon, no drain (drain=false): every Pod on it runs on through the restart"
    else:
        drained = (
            f"{name}:   cordon, then drain: evict {', '.join(plan['evict']) or 'nothing'}"
            + (
                ""
                if not unmanaged
                else f"; delete {unmanaged} (no controller owns them: drain_unmanaged=true)"
                if policy.delete_unmanaged
                else f"; Pods no controller owns stop the drain: {unmanaged}"
            )
            + (
                ""
                if not local
                else f"; their emptyDir data deleted with them: {local} (drain_delete_emptydir_data=true)"
                if policy.delete_emptydir_data
                else f"; Pods whose emptyDir data an eviction deletes stop the drain: {local}"
            )
        )
    lines = [f"{name}: repair: {plan['why']}", drained]
    for file in plan["files"]:
        kept = (
            f" (the file before kept under {NODE_BACKUPS}, where no runtime reads)"
            if file["before"] is not None
            else ""
        )
        lines += [f"{name}:   write {file['path']}, by {file['by']}{kept}:"]
        lines += [f"{name}:     {line}" for line in file["diff"]]
    lines.append(
        f"{name}:   restart {plan['runtime']} {plan['version']}, prove it (CRI, kubelet Ready, a probe Pod), uncordon"
    )
    return lines
