"""One view of a node's runtime, whatever the target: a lab host (its lab containerd, read by the
lab's facts) or a real node (read by ``runbook.reach.node.NodeRuntime`` in one command), or a node judged from
the API alone. Every audit judges this one shape, ``gpuop.judgment.viewtype.View`` (``gpuop.judgment.rules.findings``),
each of its fields said once there.

A section unread leaves its part as never read ("runtime": the files, "restart", "started", "cdi",
"hooks", "nvidia", "status"; "containerd PID", "crio PID", "kubelet PID": a process's flags), and
the rules judge the rest without it (``gpuop.judgment.runtime_rules.unread_gaps``).

Where "loaded" comes from, one vocabulary for every target: ``cri`` (the daemon answered through
CRI), ``status`` (CRI-O answered its own status API, ``crio status config``, on a node with no
crictl), ``cri-down`` (it runs, its CRI does not answer), ``no-crictl`` (no crictl on the node to
ask), ``crictl-hung`` (crictl itself did not end: the loaded view alone is not read, the rest is), ``recorded`` (the
incident day's observation: a lab host without a lab containerd), ``api``
(the node's kubelet report, Node.status.runtimeHandlers: the node was not read), ``none`` (no
runtime runs).
"""

import fnmatch
import posixpath

from gpuop.judgment import crio
from gpuop.judgment.containerd import analyze_merge, cdi_enabled, import_globs, parsed_toml
from gpuop.judgment.regen import regenerated
from gpuop.judgment.viewtype import View

RUNTIME = "containerd"  # the subject of a finding about the daemon itself

# A finding about loaded holds only where loaded was seen; one about the Pods of a node also
# where CRI was seen down, or the kubelet reported it.
LIVE = ("cri", "status")  # the running daemon's own answer
KNOWN = LIVE + ("recorded",)
JUDGED = LIVE + ("cri-down", "api", "recorded")


def _unread_files() -> dict:
    """``written_view``'s keys for files that were not read: nothing written known, no error."""
    return {"runtimes": [], "dropins": [], "unreached": [], "imports": [], "versions": {}, "errors": []}


def written_view(config: str, files: dict) -> dict:
    """What a daemon's files say: runtimes of its config and of the drop-ins its imports reach,
    which files those are, and the TOML files of the conf.d beside the config that no import
    reaches.

        written_view("/etc/containerd/config.toml", {path: {"mode": "644", "text": "..."}})
        -> {"runtimes": ["runc", "nvidia"], "dropins": ["/etc/containerd/conf.d/99-nvidia.toml"],
            "unreached": [], "errors": [], "imports": ["/etc/containerd/conf.d/*.toml"],
            "versions": {"/etc/containerd/config.toml": 2, "/etc/containerd/conf.d/99-nvidia.toml": 1}}

    ``versions``: each file's top-level ``version`` (1 where it has none, as containerd reads it).
    """
    nothing = {"runtimes": [], "dropins": [], "unreached": [], "imports": [], "versions": {}}
    if config not in files:
        return {**nothing, "errors": [f"{config} is missing or unreadable"]}
    main, error = parsed_toml(config, files[config]["text"])
    if main is None:
        return {**nothing, "errors": [error]}
    globs = import_globs(main, config)
    reached = sorted(p for p in files if p != config and any(fnmatch.fnmatchcase(p, g) for g in globs))
    docs, errors, versions = [], [], {config: main.get("version", 1)}
    for path in reached:
        doc, error = parsed_toml(path, files[path]["text"])
        docs.append(doc) if doc is not None else errors.append(error)
        if doc is not None:
            versions[path] = doc.get("version", 1)
    # a drop-in is a TOML file; a backup beside one (99-nvidia.toml.bak) is no drop-in
    conf_d = posixpath.join(posixpath.dirname(config), "conf.d")
    unreached = sorted(p for p in files if posixpath.dirname(p) == conf_d and p.endswith(".toml") and p not in reached)
    return {
        "runtimes": analyze_merge(main, docs).written,
        "dropins": reached,
        "unreached": unreached,
        "errors": errors,
        "imports": main.get("imports", []),
        "versions": versions,
    }


def unknown_view(**given) -> View:
    """The view where nothing is known; ``given`` says what is.

    unknown_view(loaded=["runc"], loaded_from="api")["cri_after_restart"] -> "unknown"
    """
    return {
        "runtime": RUNTIME,
        "version": "unknown",
        "daemon": None,
        "others": [],
        "kubelet_endpoint": None,
        "written": [],
        "dropins": [],
        "unreached": [],
        "config_errors": [],
        "imports": [],
        "versions": {},
        "regenerated": None,
        "loaded": [],
        "loaded_from": "none",
        "cri_error": "",
        "default_runtime": "",
        "cdi": None,
        "gpu_hooks": [],
        "after_restart": [],
        "cri_after_restart": "unknown",
        "restart_reason": "",
        "restart_from": "",
        "unread": {},
        "driver": None,
        **given,
    }


def loaded_part(answer: dict | None) -> dict:
    """The loaded view's keys from a CRI answer (``runbook.reach.containerd.cri_answer``'s shape).

    loaded_part({"cri": "ok", "runtimes": ["runc"], "default_runtime": "runc", "crictl": True, ...})
    -> {"loaded": ["runc"], "loaded_from": "cri", "cri_error": "", "default_runtime": "runc"}
    """
    answer = answer or {}
    if answer.get("via") == "status":
        loaded_from = "status"
    elif not answer.get("crictl", True):
        loaded_from = "no-crictl"
    elif answer.get("cri") == "unanswered":
        loaded_from = "crictl-hung"
    else:
        loaded_from = "cri" if answer.get("cri") == "ok" else "cri-down"
    return {
        "loaded": answer.get("runtimes", []),
        "loaded_from": loaded_from,
        "cri_error": answer.get("error", ""),
        "default_runtime": answer.get("default_runtime", ""),
    }


def cdi_part(answer: dict | None, version: str, gpu_specs: list) -> dict:
    """CDI as the daemon holds it: on or off in its version's terms (``cdi_enabled``), the spec
    directories it reads, and the GPU specs found there.

        cdi_part({"cdi": None, "cdi_spec_dirs": ["/etc/cdi"]}, "2.4.2", [])
        -> {"enabled": True, "spec_dirs": ["/etc/cdi"], "gpu_specs": []}
    """
    answer = answer or {}
    return {
        "enabled": cdi_enabled(version, answer.get("cdi")) if answer.get("cri") == "ok" else False,
        "spec_dirs": answer.get("cdi_spec_dirs", []),
        "gpu_specs": list(gpu_specs),
    }


def restart_part(restart: dict | None, version: str, asked: str = "", runtime: str = RUNTIME, unread: str = "") -> dict:
    """The after-a-restart view's keys from the binary's own merge (``runbook.reach.containerd.restart_answer``
    or a ``Forecast``'s fields); ``asked``: the binary, said where it was not there to ask;
    ``unread``: the deadline its read did not end within.

        restart_part({"runtimes": ["nvidia"], "cri_ok": False, "starts": True, "reason": "..."}, "1.6.20")
        -> {"after_restart": ["nvidia"], "cri_after_restart": "fails", "restart_reason": "...", ...}
    """
    if restart is None:
        reason = (
            f"its own merge of the files did not end within {unread}"
            if unread
            else f"{asked} is not there to ask"
            if asked
            else ""
        )
        return {"after_restart": [], "cri_after_restart": "unknown", "restart_reason": reason, "restart_from": ""}
    cri = "refuses-start" if not restart.get("starts", True) else "ok" if restart["cri_ok"] else "fails"
    return {
        "after_restart": list(restart["runtimes"]),
        "cri_after_restart": cri,
        "restart_reason": restart["reason"],
        "restart_from": f"{runtime} {version}'s own merge of the files",
    }


def lab_view(
    config: str, files: dict, loaded: dict | None, restart: dict | None, observed=(), daemon: dict | None = None
) -> View:
    """A lab host's runtime: its lab containerd's files, CRI answer and restart forecast; on a host
    without a lab containerd (``restart`` None), the ``observed`` handlers, "recorded".

    + config: the lab's main config; files: it and every file beside it ({path: {"text"}})
    + loaded: ``LabContainerd``'s answer; restart: ``ContainerdRestart``'s (with ``version``)
    + daemon: {"pid", "exe", "config", "address", "binary"} of the lab daemon

        lab_view(".../config.toml", files, None, None, observed=("runc",))["loaded_from"] -> "recorded"
    """
    written = written_view(config, files)
    view = unknown_view(
        written=written["runtimes"],
        dropins=written["dropins"],
        unreached=written["unreached"],
        config_errors=written["errors"],
        imports=written["imports"],
        versions=written["versions"],
    )
    if restart is None:
        return {**view, "version": "none", "loaded": list(observed), "loaded_from": "recorded"}
    version = restart["version"]
    return {
        **view,
        **loaded_part(loaded),
        **restart_part(restart, version),
        "version": version,
        "daemon": daemon,
        "cdi": cdi_part(loaded, version, []),
    }


def api_handlers(node: dict) -> list | None:
    """The handlers the API says the node's runtime loaded: ``Node.status.runtimeHandlers``, which
    kubelet copies from its runtime's CRI status (containerd 2.0+), the default one named "";
    None where the node reports none (containerd 1.x answers none), so only a read of the node
    judges it.

        api_handlers({"status": {"runtimeHandlers": [{"name": ""}, {"name": "runc"}]}}) -> ["", "runc"]
    """
    handlers = (node.get("status") or {}).get("runtimeHandlers")
    return sorted(h.get("name") or "" for h in handlers) if handlers else None


def api_view(node: dict) -> View | None:
    """A node judged from the API alone, where the node itself was not read: "loaded" is what its
    kubelet reports (``api_handlers``), its runtime what it names (``api_runtime``), the other
    views unknown; None where it reports none.

        api_view({"metadata": {"name": "gpu-a"}, "status": {"runtimeHandlers": [{"name": ""}, {"name": "runc"}]}})
        -> {"loaded": ["runc"], "loaded_from": "api", "daemon": None, ...}
    """
    handlers = api_handlers(node)
    if handlers is None:
        return None
    runtime, version = api_runtime(node)
    return unknown_view(runtime=runtime, version=version, loaded=[h for h in handlers if h], loaded_from="api")


def api_runtime(node: dict) -> tuple:
    """The runtime and its version as the node's kubelet reports them
    (``Node.status.nodeInfo.containerRuntimeVersion``, "NAME://VERSION"); containerd and
    "unknown" where it reports none.

        api_runtime({"status": {"nodeInfo": {"containerRuntimeVersion": "cri-o://1.36.3"}}}) -> ("cri-o", "1.36.3")
    """
    said = ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or ""
    name, sep, version = said.partition("://")
    return (name, version.lstrip("v") or "unknown") if sep and name else (RUNTIME, "unknown")


def node_view(read: dict) -> View:
    """A real node's runtime, from ``NodeRuntime``'s read: the daemon that is the node's runtime (the
    one the read asked: kubelet's, else the only one, else the one on the default socket), its
    version and three views, and the other daemons. On k3s and RKE2, which write the config anew
    at start, after a restart is what they would write (``gpuop.judgment.regen``).

        node_view(read)["cri_after_restart"] -> "ok" | "fails" | "refuses-start" | "unknown"

    Beside the runtime, the node's NVIDIA driver as its read found it (``driver``:
    ``gpuop.judgment.driver``'s facts; None where it was not read).
    """
    return {**_runtime_of(read), "driver": read.get("driver")}


def _runtime_of(read: dict) -> View:
    """``node_view``'s runtime part."""
    endpoint = read["kubelet"]["endpoint"] if read.get("kubelet") else None
    unread = {k.split(" ")[0] if k.startswith("runtime ") else k: v for k, v in (read.get("unread") or {}).items()}
    daemons = [(RUNTIME, d) for d in read["containerds"]] + [(crio.NAME, d) for d in read.get("crios", [])]
    runtime, daemon = next(((r, d) for r, d in daemons if d["serves"]), (RUNTIME, None))
    others = [
        {"pid": d["pid"], "config": d["config"], "address": d["address"], "runtime": r}
        for r, d in daemons
        if d is not daemon
    ]
    if daemon is None:
        return unknown_view(version="none", kubelet_endpoint=endpoint, others=others, unread=unread)
    if runtime == crio.NAME:
        return crio_view(daemon, endpoint, others, unread)
    loaded, restart = daemon["loaded"] or {}, daemon["restart"]
    written = written_view(daemon["config"], daemon["files"]) if "runtime" not in unread else _unread_files()
    version = restart["version"] if restart else "unknown"
    view = unknown_view(
        version=version,
        kubelet_endpoint=endpoint,
        others=others,
        daemon={
            "pid": daemon["pid"],
            "exe": daemon["exe"],
            "config": daemon["config"],
            "address": daemon["address"],
            "binary": daemon.get("binary") or daemon["exe"],
            "started": daemon.get("started"),
        },
        written=written["runtimes"],
        dropins=written["dropins"],
        unreached=written["unreached"],
        config_errors=written["errors"],
        imports=written["imports"],
        versions=written["versions"],
        **loaded_part(loaded),
        cdi=cdi_part(loaded, version, daemon.get("gpu_cdi_specs", [])),
        unread=unread,
    )
    regen = regenerated(daemon["config"], daemon["files"], version, daemon.get("nvidia_runtimes", []))
    if regen is not None:  # k3s or RKE2 writes the file anew at start: that file is what loads
        return {**view, **_regenerated_part(regen, daemon["config"], "nvidia" in unread)}
    if restart is None and not daemon.get("binary") and "restart" not in unread:
        return {
            **view,
            "restart_reason": f"{daemon['exe']} is not named containerd and has no containerd beside it to ask",
        }
    return {**view, **restart_part(restart, version, daemon.get("binary") or "", RUNTIME, unread.get("restart", ""))}


def _regenerated_part(regen: dict, config: str, binaries_unread: bool) -> dict:
    """The after-restart view of a node whose config k3s or RKE2 writes anew at start
    (``gpuop.judgment.regen.regenerated``): what that config holds, unknown where the NVIDIA
    binaries it registers were not looked for."""
    if binaries_unread:  # what it registers at start depends on the binaries found
        reason = (
            f"{regen['by']} writes {config} anew at its next start, with the NVIDIA runtimes it finds, not looked for"
        )
        regen = {**regen, "known": False, "reason": reason}
    cri = "unknown" if not regen["known"] else "ok" if regen["default_runtime"] in regen["runtimes"] else "fails"
    reason = regen["reason"] + (
        f", whose default_runtime_name {regen['default_runtime']} has no runtime" if cri == "fails" else ""
    )
    return {
        "regenerated": regen,
        "after_restart": regen["runtimes"],
        "cri_after_restart": cri,
        "restart_reason": reason,
        "restart_from": f"the config {regen['by']} writes anew at its next start",
    }


def crio_view(daemon: dict, endpoint: str | None, others: list, unread: dict | None = None) -> View:
    """A real node's CRI-O, from ``NodeRuntime``'s read of the daemon that serves: its files
    (``gpuop.judgment.crio.written_view``), what it holds (CRI), its binary's own merge for the next start
    or SIGHUP, and the OCI hooks that hand GPUs to containers with no handler (``gpu_hooks``).

        crio_view(read["crios"][0], "/var/run/crio/crio.sock", [])["runtime"] -> "cri-o"
    """
    unread = unread or {}
    loaded, restart = daemon["loaded"] or {}, daemon["restart"]
    written = crio.written_view(daemon["config"], daemon["config_dir"], daemon["files"])
    version = restart["version"] if restart else "unknown"
    return unknown_view(
        unread=unread,
        runtime=crio.NAME,
        version=version,
        kubelet_endpoint=endpoint,
        others=others,
        daemon={
            "pid": daemon["pid"],
            "exe": daemon["exe"],
            "config": daemon["config"],
            "config_dir": daemon["config_dir"],
            "address": daemon["address"],
            "binary": daemon["exe"],
            "started": daemon.get("started"),
        },
        written=written["runtimes"],
        dropins=written["dropins"],
        config_errors=written["errors"],
        **loaded_part(loaded),
        cdi=cdi_part(loaded, version, daemon.get("gpu_cdi_specs", [])),
        gpu_hooks=crio.hooked_gpus(daemon.get("hooks") or {}),
        **restart_part(restart, version, daemon["exe"], crio.NAME, unread.get("restart", "")),
    )
