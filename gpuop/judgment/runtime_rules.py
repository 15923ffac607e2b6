"""The rules of a runtime alone, before any cluster object: what its next start does, its files,
whether CRI answers, handlers written but not loaded, and the sections of a node's read that did
not end in time. Subjects: the runtime (``containerd``), a handler, a file's path."""

from gpuop.judgment import crio
from gpuop.judgment.gaps import gap
from gpuop.judgment.regen import template_to_edit
from gpuop.judgment.view import KNOWN, RUNTIME
from gpuop.judgment.viewtype import View


def runtime_findings(view: View) -> list:
    """The gaps of the daemon alone, before any cluster object, in this order: what its next start
    does, the other runtimes beside it, its files, whether CRI answers, and the handlers written
    but not loaded or lost at the next start.

        runtime_findings(view) -> [{"kind": "restart-takes-cri-down", "subject": "containerd", ...}, ...]
    """
    return restart_gaps(view) + second_runtime_gaps(view) + file_gaps(view) + cri_gaps(view) + handler_gaps(view)


def restart_gaps(view: View) -> list:
    """What the runtime's next start does: it refuses to start, takes CRI down, or (CRI-O) starts
    without a runtime whose binary is missing (``gpuop.judgment.crio.restart_forecast``).

        restart_gaps(view) -> [{"kind": "restart-takes-cri-down", "subject": "containerd", ...}]
    """
    version, rt, after = view["version"], view["runtime"], view["cri_after_restart"]
    if after == "refuses-start":
        words = (
            f"{rt} {version} would not start at its next restart, so no Pod could start on "
            f"this node{_above_root(view)}: {view['restart_reason']}"
        )
        return [gap("restart-refuses-start", rt, ["after-restart"], words)]
    if after == "fails":
        words = (
            f"a restart of {rt} on this node takes CRI down: {view['restart_reason']} "
            f"(after restart: {view['restart_from']})"
        )
        return [gap("restart-takes-cri-down", rt, ["after-restart"], words)]
    if rt != crio.NAME or after != "ok":
        return []
    gaps = []
    for handler in _missing(view["written"], view["after_restart"]):
        why = next((w for w in view["restart_reason"].split("; ") if f"runtime {handler}'s" in w), "")
        words = f"runtime handler {handler} is written, but a restart or reload of {rt} {version} drops it: {why}"
        gaps.append(gap("restart-drops-runtime", handler, ["written", "after-restart"], words))
    return gaps


def second_runtime_gaps(view: View) -> list:
    """A gap for each runtime beside the audited one (a second containerd, or CRI-O also).

    second_runtime_gaps(view) -> [{"kind": "second-containerd", "subject": "4242", ...}]
    """
    gaps, rt, d = [], view["runtime"], view["daemon"]
    for other in view["others"]:
        ort = other.get("runtime", RUNTIME)
        gaps.append(
            gap(
                f"second-{ort}",
                str(other["pid"]),
                ["loaded"],
                f"{'a second ' + ort if ort == rt else ort + ' also'} runs (pid {other['pid']}, config "
                f"{other['config']}, socket {other['address']}); the audited one is "
                f"{'' if ort == rt else rt + ' '}pid {d['pid']} on {d['address']}"
                + (", kubelet's endpoint" if view["kubelet_endpoint"] else ""),
            )
        )
    return gaps


def file_gaps(view: View) -> list:
    """The runtime's files: a config it cannot read, a drop-in no imports glob reaches.

    file_gaps(view) -> [{"kind": "dropin-not-imported", "subject": "/etc/containerd/conf.d/99-nvidia.toml", ...}]
    """
    config = _config(view)
    gaps = [gap("config-unreadable", config, ["written"], e) for e in view["config_errors"]]
    for path in view["unreached"]:
        words = (
            f"{path} is in conf.d but no imports glob of {config} reaches it "
            f"(imports: {', '.join(view['imports']) or 'none'}): containerd never reads it"
        )
        gaps.append(gap("dropin-not-imported", path, ["written"], words))
    return gaps


def cri_gaps(view: View) -> list:
    """Whether what the runtime holds was read: crictl hung (the loaded view named unread, the rest
    judged without it), a section of the read unread (``unread_gaps``), CRI down.

        cri_gaps(view) -> [{"kind": "cri-down", "subject": "containerd", ...}]
    """
    gaps, version, d, rt = [], view["version"], view["daemon"], view["runtime"]
    if view["loaded_from"] == "crictl-hung":
        words = (
            f"what {rt} {version} holds was not read: {view['cri_error']} (crictl itself hung, past "
            "its own 3 s deadline): nothing is judged against the loaded view, the rest is"
        )
        gaps.append(gap("view-unread", rt, ["loaded"], words))
    gaps += unread_gaps(view)
    if view["loaded_from"] == "cri-down":
        where = f" on {d['address']}" if d else ""
        words = f"{rt} {version} runs but its CRI does not answer{where} ({view['cri_error']}): "
        gaps.append(gap("cri-down", rt, ["loaded"], words + "no Pod can start on this node"))
    return gaps


def handler_gaps(view: View) -> list:
    """The handlers written but not loaded (where loaded is known), and those the runtime's next
    start loses because k3s or RKE2 writes its config anew from a template without them.

        handler_gaps(view) -> [{"kind": "handler-not-loaded", "subject": "nvidia", ...}]
    """
    gaps = []
    if view["loaded_from"] in KNOWN:
        for handler in _missing(view["written"], view["loaded"]):
            words = f"runtime handler {handler} is written but not loaded ({_loaded_words(view)})"
            gaps.append(gap("handler-not-loaded", handler, ["written", "loaded"], words))
    regen, config = view.get("regenerated"), _config(view)
    if regen and regen["known"]:
        for handler in _missing(view["written"], regen["runtimes"]):
            words = (
                f"runtime handler {handler} is written in {config} (or a file its imports "
                f"reach), which {regen['by']} writes anew at its next start from "
                f"{regen['source']}, and that does not define it: the next start loses it. "
                f"Define it in {template_to_edit(config, view['version'], regen)}"
            )
            gaps.append(gap("lost-at-regeneration", handler, ["written", "after-restart"], words))
    return gaps


def _missing(written: list, held: list) -> list:
    """The handlers written that ``held`` does not name, in their written order."""
    return [h for h in written if h not in held]


def _config(view: View) -> str:
    return view["daemon"]["config"] if view["daemon"] else "the main config"


def _loaded_words(view: View) -> str:
    return {
        "cri": f"loaded, live through CRI of {view['runtime']} {view['version']}",
        "status": f"loaded, live from {view['runtime']} {view['version']}'s own status (no crictl on the node)",
        "recorded": "recorded: the incident day's observation, no lab containerd here",
    }[view["loaded_from"]]


# What each section of a node's read stands for, where it did not end in time (``view["unread"]``),
# and a file whose text was not had: the views it leaves unread, and its words ({rt}, {version},
# {arg}: the section's argument, a process's pid or a file's path; {within}: its deadline or why).
_UNREAD = {
    "driver": (
        ["loaded", "written", "after-restart"],
        "the NVIDIA driver (its modules, libraries and the next boot's kernel) was not read within "
        "{within}: nothing is judged of the driver, the runtime is",
    ),
    "runtime": (
        ["written"],
        "the files of {rt} {version} (its config and drop-ins) were not read: their read did "
        "not end within {within} (a file that blocks reads: a FIFO, a hung mount): nothing is "
        "judged against the written view, the rest is",
    ),
    "restart": (
        ["after-restart"],
        "what {rt} {version} loads at its next start was not read: its own merge of the "
        "files did not end within {within}: nothing is judged against the after-restart "
        "view, the rest is",
    ),
    "started": (
        ["loaded"],
        "when {rt} {version} started was not read within {within}: no sandbox failure is held "
        "against what it holds, the rest is judged",
    ),
    "status": (
        ["loaded"],
        "what {rt} {version} holds was not read: its own status API did not end within {within}: "
        "nothing is judged against the loaded view, the rest is",
    ),
    "cdi": (
        ["loaded"],
        "the CDI specs in the spec directories of {rt} {version} were not read: their read did not "
        "end within {within} (a file that blocks reads: a FIFO, a hung mount): no Pod is judged on "
        "them, the rest is",
    ),
    "hooks": (
        ["loaded"],
        "the OCI hooks {rt} {version} reads were not read: their read did not end within {within} "
        "(a file that blocks reads): no Pod is judged on them, the rest is",
    ),
    "nvidia": (
        ["after-restart"],
        "the NVIDIA runtime binaries the next start of {rt} registers were not looked for "
        "within {within}: what it loads then is not judged, the rest is",
    ),
    "processes": (
        ["loaded"],
        "the node's processes were not listed within {within} (a /proc that blocks reads): which "
        "runtime serves this node is not known, none is judged",
    ),
    "containerd": (
        ["loaded"],
        "the flags of containerd pid {arg} (its config and socket) were not read within "
        "{within} (a file they name blocks reads): whether it serves this node is not known",
    ),
    "crio": (
        ["loaded"],
        "the flags of CRI-O pid {arg} (its config and socket) were not read within {within} "
        "(a file they name blocks reads): whether it serves this node is not known",
    ),
    "kubelet": (
        ["loaded"],
        "the endpoint of kubelet pid {arg} was not read within {within} (a file of its config "
        "blocks reads): the runtime judged is the one on the default socket",
    ),
    "file": (
        ["written"],
        "the file {arg} of {rt} {version} was not read ({within}): what it says is not judged, the rest is",
    ),
}


def unread_gaps(view: View) -> list:
    """A ``view-unread`` gap for each section of a node's read that did not end in time, but CRI's
    (``crictl-hung``, named with the loaded view): what it leaves unjudged.

        unread_gaps({**view, "unread": {"cdi": "10s"}})
        -> [{"kind": "view-unread", "subject": "containerd", "views": ["loaded"], "detail": "the CDI specs ..."}]
    """
    gaps = []
    for section, within in view["unread"].items():
        kind, _, arg = section.partition(" ")
        if kind not in _UNREAD:
            continue
        views, words = _UNREAD[kind]
        gaps.append(
            gap(
                "view-unread",
                f"{kind} {arg}" if arg else view["runtime"],
                views,
                words.format(rt=view["runtime"], version=view["version"], arg=arg, within=within),
            )
        )
    return gaps


def _above_root(view: View) -> str:
    """The files whose ``version`` is above the root config's, in words (containerd 2.2 refuses
    any version above 3, 2.3.0-2.3.4 a drop-in above its root's): where the refusal comes from."""
    versions = view.get("versions") or {}
    config = view["daemon"]["config"] if view["daemon"] else next(iter(versions), "")
    root = versions.get(config)
    above = [
        f"{path} (version {v})"
        for path, v in versions.items()
        if path != config and root is not None and isinstance(v, int) and v > root
    ]
    return f"; {', '.join(above)} beside {config} (version {root})" if above else ""
