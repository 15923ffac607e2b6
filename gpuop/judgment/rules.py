"""The one judgment: a node's runtime view (``gpuop.judgment.view``) joined with the cluster's objects,
as gaps (``gpuop.judgment.gaps``); each rule is written here once. ``judge`` is its one door for a runtime
(the lab audit, the node audit, the repair's plan and its audit after all call it);
``cluster_gaps`` judges the cluster as a whole, for a fleet (the lab's audit asks the same
rules, ``overcommitted`` and ``stalled_rollout``, object by object, in its report's order).

Subjects: a finding about the daemon itself names the runtime (``containerd``), one about a
handler names the handler, one about a Pod ``namespace/name``, one about a Node its name, one
about a file its path.
"""

import re

import jmespath

from gpuop.judgment import crio
from gpuop.judgment.cluster import (
    allocatable_count,
    event_epoch,
    gpus_asked,
    has_sandbox,
    owned_pods,
    ready,
    rollout_complete,
    rollout_settled,
    rollout_status,
    said_by_kubelet,
    sandbox_failure,
)
from gpuop.judgment.containerd import release
from gpuop.judgment.gaps import gap
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.regen import template_to_edit
from gpuop.judgment.view import JUDGED, KNOWN, LIVE, RUNTIME, api_handlers

TOOLKIT_MARK = "container-toolkit"  # the toolkit DaemonSet's name holds it (GPU Operator's and the lab's)
DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver: the devices it allocates are GPUs
AT_RISK = (
    "sandbox-fails",
    "sandbox-refuses-loaded",
    "handler-gone-after-restart",
    "gpu-pod-cdi-off",
    "cdi-spec-missing",
    "dra-claim-cdi-off",
)


def active(pod: dict) -> bool:
    """A Pod that runs or will: not ended, not being deleted."""
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def sandbox_error(version: str, handler: str) -> str:
    """What containerd of ``version`` answers kubelet for a sandbox whose handler it does not load
    (kubelet's event: ``Failed to create pod sandbox: rpc error: code = Unknown desc = ...``).

        sandbox_error("1.6.20", "nvidia") -> 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    """
    cause = f'no runtime for "{handler}" is configured'
    if release(version) >= (2,):
        return f'unable to get OCI runtime for sandbox "<id>": {cause}'
    return f"failed to get sandbox runtime: {cause}"


def sandbox_refusal(view: dict, handler: str) -> str:
    """What the view's runtime answers kubelet for a sandbox whose ``handler`` it does not hold:
    containerd's words for its version (``sandbox_error``), or CRI-O's naming what it holds.

        sandbox_refusal({"runtime": "cri-o", "loaded": ["runc"], ...}, "nvidia")
        -> "failed to find runtime handler nvidia from runtime list map[runc:<ptr>]"
    """
    if view["runtime"] == crio.NAME:
        return crio.sandbox_error(handler, view["loaded"])
    return sandbox_error(view["version"], handler)


def says_sandbox_error(message: str, expected: str) -> bool:
    """Whether a kubelet's event message ends with ``expected`` (``sandbox_refusal``'s), a sandbox's
    id where it has ``<id>``, a Go pointer where it has ``<ptr>``.

        says_sandbox_error('Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get '
                           'sandbox runtime: no runtime for "nvidia" is configured',
                           sandbox_error("1.6.20", "nvidia")) -> True
    """
    pattern = re.escape(expected).replace(re.escape("<id>"), "[0-9a-f]{64}").replace(re.escape("<ptr>"), "0x[0-9a-f]+")
    return re.search(f"{pattern}$", message) is not None


def kubelet_agrees(pod: dict, events: list, expected: str) -> dict:
    """The kubelet's own word on a sandbox forecast to fail: its latest FailedCreatePodSandBox
    event for ``pod``, and whether it says what the runtime says (``expected``: ``sandbox_refusal``).

        kubelet_agrees(pod, events, sandbox_refusal(view, "nvidia")) -> {"event": "Failed to create ...", "agrees":
            True}
    """
    event = sandbox_failure(events, pod)
    return {
        "event": event["message"] if event else None,
        "agrees": bool(event) and says_sandbox_error(event["message"], expected),
    }


def refuses(view: dict, handler: str, message: str) -> bool:
    """Whether a kubelet's sandbox failure is the view's runtime refusing ``handler`` as one it
    does not hold, whatever handlers CRI-O lists beside.

        refuses(crio_view, "nvidia", "... failed to find runtime handler nvidia from runtime list map[runc:0xc0]") ->
            True
    """
    if view["runtime"] == crio.NAME:
        return (
            re.search(rf"failed to find runtime handler {re.escape(handler)} from runtime list map\[[^\]]*\]$", message)
            is not None
        )
    return says_sandbox_error(message, sandbox_error(view["version"], handler))


def refused_while_loaded(name: str, view: dict, objects: list, events: list) -> list:
    """The active Pods on node ``name`` whose handler the runtime's live status names while they
    have no sandbox, the newest word on it of that node's own kubelet (``said_by_kubelet``), said
    after this daemon started, being that runtime refusing the handler: a status its sandboxes do
    not share (CRI-O after a reload, cri-o#10202). Each with its class, handler and the kubelet's
    event. None where the daemon's start is not known (an older event may be a daemon's since
    restarted).

        refused_while_loaded("gpu-a", view, objects, events) -> [(pod, "nvidia", "nvidia", "Failed to create pod
            sandbox: ...")]
    """
    started = (view["daemon"] or {}).get("started")
    if view["loaded_from"] not in LIVE or started is None:
        return []
    found, kubelets = [], [e for e in events if said_by_kubelet(e, name)]  # no other's word on this node
    for pod, rc, handler in classed_pods(name, objects):
        event = sandbox_failure(kubelets, pod) if handler in view["loaded"] and not has_sandbox(pod) else None
        if event and event_epoch(event) > started and refuses(view, handler, event["message"]):
            found.append((pod, rc, handler, event["message"]))
    return found


def _loaded_words(view: dict) -> str:
    return {
        "cri": f"loaded, live through CRI of {view['runtime']} {view['version']}",
        "status": f"loaded, live from {view['runtime']} {view['version']}'s own status (no crictl on the node)",
        "recorded": "recorded: the incident day's observation, no lab containerd here",
    }[view["loaded_from"]]


def runtime_findings(view: dict) -> list:
    """The gaps of the daemon alone, before any cluster object: what a restart does, its files,
    whether CRI answers, and handlers written but not loaded.

        runtime_findings(view) -> [{"kind": "restart-takes-cri-down", "subject": "containerd", ...}, ...]
    """
    gaps, version, d, rt = [], view["version"], view["daemon"], view["runtime"]
    if view["cri_after_restart"] == "refuses-start":
        gaps.append(
            gap(
                "restart-refuses-start",
                rt,
                ["after-restart"],
                f"{rt} {version} would not start at its next restart, so no Pod could start on "
                f"this node{_above_root(view)}: {view['restart_reason']}",
            )
        )
    elif view["cri_after_restart"] == "fails":
        gaps.append(
            gap(
                "restart-takes-cri-down",
                rt,
                ["after-restart"],
                f"a restart of {rt} on this node takes CRI down: {view['restart_reason']} "
                f"(after restart: {view['restart_from']})",
            )
        )
    elif rt == crio.NAME and view["cri_after_restart"] == "ok":
        # it starts without a runtime whose binary is missing (gpuop.judgment.crio.restart_forecast)
        for handler in view["written"]:
            if handler not in view["after_restart"]:
                why = next((w for w in view["restart_reason"].split("; ") if f"runtime {handler}'s" in w), "")
                gaps.append(
                    gap(
                        "restart-drops-runtime",
                        handler,
                        ["written", "after-restart"],
                        f"runtime handler {handler} is written, but a restart or reload of {rt} {version} "
                        f"drops it: {why}",
                    )
                )
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
    config = d["config"] if d else "the main config"
    gaps += [gap("config-unreadable", config, ["written"], e) for e in view["config_errors"]]
    for path in view["unreached"]:
        gaps.append(
            gap(
                "dropin-not-imported",
                path,
                ["written"],
                f"{path} is in conf.d but no imports glob of {config} reaches it "
                f"(imports: {', '.join(view['imports']) or 'none'}): containerd never reads it",
            )
        )
    if view["loaded_from"] == "crictl-hung":  # one view unread: named, and the rest judged without it
        gaps.append(
            gap(
                "view-unread",
                rt,
                ["loaded"],
                f"what {rt} {version} holds was not read: {view['cri_error']} (crictl itself hung, past "
                "its own 3 s deadline): nothing is judged against the loaded view, the rest is",
            )
        )
    gaps += unread_gaps(view)
    if view["loaded_from"] == "cri-down":
        where = f" on {d['address']}" if d else ""
        gaps.append(
            gap(
                "cri-down",
                rt,
                ["loaded"],
                f"{rt} {version} runs but its CRI does not answer{where} ({view['cri_error']}): "
                "no Pod can start on this node",
            )
        )
    if view["loaded_from"] in KNOWN:
        for handler in view["written"]:
            if handler not in view["loaded"]:
                gaps.append(
                    gap(
                        "handler-not-loaded",
                        handler,
                        ["written", "loaded"],
                        f"runtime handler {handler} is written but not loaded ({_loaded_words(view)})",
                    )
                )
    regen = view.get("regenerated")
    if regen and regen["known"]:
        for handler in view["written"]:
            if handler not in regen["runtimes"]:
                gaps.append(
                    gap(
                        "lost-at-regeneration",
                        handler,
                        ["written", "after-restart"],
                        f"runtime handler {handler} is written in {config} (or a file its imports "
                        f"reach), which {regen['by']} writes anew at its next start from "
                        f"{regen['source']}, and that does not define it: the next start loses it. "
                        f"Define it in {template_to_edit(config, version, regen)}",
                    )
                )
    return gaps


# What each section of a node's read stands for, where it did not end in time (``view["unread"]``):
# the views it leaves unread, and its words ({rt}, {version}, {pid}, {within}).
_UNREAD = {
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
        "the flags of containerd pid {pid} (its config and socket) were not read within "
        "{within} (a file they name blocks reads): whether it serves this node is not known",
    ),
    "crio": (
        ["loaded"],
        "the flags of CRI-O pid {pid} (its config and socket) were not read within {within} "
        "(a file they name blocks reads): whether it serves this node is not known",
    ),
    "kubelet": (
        ["loaded"],
        "the endpoint of kubelet pid {pid} was not read within {within} (a file of its config "
        "blocks reads): the runtime judged is the one on the default socket",
    ),
}


def unread_gaps(view: dict) -> list:
    """A ``view-unread`` gap for each section of a node's read that did not end in time, but CRI's
    (``crictl-hung``, named with the loaded view): what it leaves unjudged.

        unread_gaps({**view, "unread": {"cdi": "10s"}})
        -> [{"kind": "view-unread", "subject": "containerd", "views": ["loaded"], "detail": "the CDI specs ..."}]
    """
    gaps = []
    for section, within in view["unread"].items():
        kind, _, pid = section.partition(" ")
        if kind not in _UNREAD:
            continue
        views, words = _UNREAD[kind]
        gaps.append(
            gap(
                "view-unread",
                f"{kind} {pid}" if pid else view["runtime"],
                views,
                words.format(rt=view["runtime"], version=view["version"], pid=pid, within=within),
            )
        )
    return gaps


def _above_root(view: dict) -> str:
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


def api_disagrees(node: dict, view: dict) -> list:
    """The gap where a Node's ``status.runtimeHandlers`` (kubelet's copy of its runtime's CRI
    status) and the daemon's own CRI answer name different handlers; none where the node reports
    no handlers (containerd 1.x) or CRI did not answer.

        api_disagrees(node, view)   # the API says "", runc; CRI says runc, nvidia
        -> [{"kind": "loaded-disagrees-with-api", "subject": "gpu-a", ...}]
    """
    reported, name = api_handlers(node), node["metadata"]["name"]
    if reported is None or view["loaded_from"] not in LIVE or set(reported) - {""} == set(view["loaded"]):
        return []
    return [
        gap(
            "loaded-disagrees-with-api",
            name,
            ["loaded", "scheduled"],
            f"node {name}'s kubelet reports {','.join(h or '(default)' for h in reported)} loaded "
            f"(Node.status.runtimeHandlers), its {view['runtime']} {view['version']} answers "
            f"{','.join(view['loaded']) or 'none'} through CRI",
        )
    ]


def classed_pods(name: str, objects: list) -> list:
    """The active Pods bound to node ``name`` that name a RuntimeClass, each with its class and
    the handler it asks for (the class's, or its own name where the class is gone).

        classed_pods("gpu-a", objects) -> [(pod, "nvidia", "nvidia")]
    """
    handlers = {rc["metadata"]["name"]: rc.get("handler") for rc in of_kind(objects, "RuntimeClass")}
    return [
        (
            pod,
            pod["spec"]["runtimeClassName"],
            handlers.get(pod["spec"]["runtimeClassName"], pod["spec"]["runtimeClassName"]),
        )
        for pod in of_kind(objects, "Pod")
        if pod["spec"].get("nodeName") == name and active(pod) and pod["spec"].get("runtimeClassName")
    ]


def _pod_findings(name: str, view: dict, objects: list, events: list | None) -> list:
    """Pods bound to the node whose RuntimeClass's handler is not loaded (their sandbox fails, in
    the version's words and, where Events were read, against the kubelet's own), or will not be
    after a restart."""
    gaps, version, loaded_from, rt = [], view["version"], view["loaded_from"], view["runtime"]
    knows = loaded_from in JUDGED
    restart_ok = view["cri_after_restart"] == "ok"
    refused = {ref(p): said for p, _, _, said in refused_while_loaded(name, view, objects, events or [])}
    for pod, rc, handler in classed_pods(name, objects):
        if knows and handler not in view["loaded"]:
            if loaded_from == "cri-down":
                why = "its CRI is down"
            elif loaded_from == "api":
                why = (
                    f"its kubelet reports only {','.join(view['loaded']) or 'none'} loaded "
                    "(Node.status.runtimeHandlers; the node itself was not read)"
                )
            else:
                refusal = sandbox_refusal(view, handler)
                why = f"{rt} {version} says: {refusal}"
                if events is not None:
                    said = kubelet_agrees(pod, events, refusal)
                    why += (
                        "; the kubelet's event agrees"
                        if said["agrees"]
                        else f"; the kubelet's event says otherwise: {said['event']}"
                        if said["event"]
                        else "; no kubelet event for it yet"
                    )
            gaps.append(
                gap(
                    "sandbox-fails",
                    ref(pod),
                    ["scheduled", "loaded"],
                    f"Pod {ref(pod)} (RuntimeClass {rc}, handler {handler}) cannot start a sandbox on {name}: {why}",
                )
            )
        elif ref(pod) in refused:
            reload = (
                "; a reload (SIGHUP) reaches CRI-O's status, not its sandboxes (cri-o#10202)" if rt == crio.NAME else ""
            )
            cure = "; a restart loads it" if restart_ok and handler in view["after_restart"] else ""
            gaps.append(
                gap(
                    "sandbox-refuses-loaded",
                    ref(pod),
                    ["loaded", "scheduled"],
                    f"Pod {ref(pod)} (RuntimeClass {rc}, handler {handler}) cannot start a sandbox on {name}: "
                    f"{rt} {version}'s status names {handler}, its sandboxes refuse it (the kubelet's newest "
                    f"event: {refused[ref(pod)]}){reload}{cure}",
                )
            )
        elif loaded_from in LIVE + ("cri-down",) and (not restart_ok or handler not in view["after_restart"]):
            gaps.append(
                gap(
                    "handler-gone-after-restart",
                    ref(pod),
                    ["scheduled", "after-restart"],
                    f"Pod {ref(pod)} (handler {handler}) runs now, but after a restart "
                    + (
                        f"CRI is {view['cri_after_restart']}"
                        if not restart_ok
                        else f"{rt} loads only {','.join(view['after_restart']) or 'nothing'}"
                    ),
                )
            )
    return gaps


def _gpu_pods_without_a_class(name: str, view: dict, objects: list, gpu_handler: str) -> list:
    """GPU Pods with no RuntimeClass (the GPU Operator's CDI mode, and any Pod that trusts the
    node's default): each gets its GPU from the default runtime when that is ``gpu_handler``,
    else only through CDI, which needs CDI on in the daemon and a spec of nvidia.com/gpu devices
    in the directories it reads. Either missing is a gap naming the Pod."""
    gaps, cdi, version, rt = [], view["cdi"], view["version"], view["runtime"]
    default = view["default_runtime"] or "runc"
    if default == gpu_handler or cdi is None or view.get("gpu_hooks") or "hooks" in view["unread"]:
        return gaps  # an OCI hook hands every container its GPUs
    for pod in of_kind(objects, "Pod"):
        if pod["spec"].get("nodeName") != name or pod["spec"].get("runtimeClassName") or not active(pod):
            continue
        gpus = gpus_asked(pod)
        if not gpus:
            continue
        asks = f"Pod {ref(pod)} asks for {gpus} nvidia.com/gpu with no RuntimeClass"
        if not cdi["enabled"]:
            refusal = _cdi_refusal(version, "the Pod's")
            gaps.append(
                gap(
                    "gpu-pod-cdi-off",
                    ref(pod),
                    ["scheduled", "loaded"],
                    f"{asks}: {rt} {version} runs it with its default runtime {default}, and "
                    f"CDI is off (enable_cdi), so it {refusal}",
                )
            )
        elif not cdi["gpu_specs"] and "cdi" not in view["unread"]:
            gaps.append(
                gap(
                    "cdi-spec-missing",
                    ref(pod),
                    ["scheduled", "loaded"],
                    f"{asks}: CDI is on in {rt} {version}, but no spec of nvidia.com/gpu "
                    f"devices is in {', '.join(cdi['spec_dirs']) or 'its spec directories'}: "
                    "its device request cannot be resolved",
                )
            )
    return gaps


def claims_of(objects: list) -> dict:
    """The cluster's ResourceClaims by ``namespace/name``, for ``dra_gpus`` (built once a read)."""
    return {ref(c): c for c in of_kind(objects, "ResourceClaim")}


def dra_gpus(pod: dict, claims: dict, driver: str = DRIVER) -> list:
    """The Pod's ResourceClaims allocated devices of ``driver`` (DRA): ``[(claim, [device, ...])]``,
    each claim ``namespace/name``, named by the Pod's spec or, made from a template, its status;
    ``claims``: ``claims_of`` the cluster's objects.

        dra_gpus(pod, claims_of(objects)) -> [("ml/train-gpu", ["gpu-0"])]
    """
    ns = pod["metadata"].get("namespace")
    named = [c.get("resourceClaimName") for c in pod["spec"].get("resourceClaims") or []]
    named += [c.get("resourceClaimName") for c in (pod.get("status") or {}).get("resourceClaimStatuses") or []]
    found = []
    for name in dict.fromkeys(n for n in named if n):
        allocation = ((claims.get(f"{ns}/{name}") or {}).get("status") or {}).get("allocation") or {}
        devices = [
            r.get("device") for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == driver
        ]
        if devices:
            found.append((f"{ns}/{name}", devices))
    return found


def node_gpus(node: dict, objects: list, driver: str = DRIVER) -> int:
    """A node's GPUs: those it advertises (``nvidia.com/gpu``) and the devices of ``driver`` its
    ResourceSlices publish (DRA).

        node_gpus(node, objects) -> 8
    """
    name = node["metadata"]["name"]
    published = sum(
        len((s.get("spec") or {}).get("devices") or [])
        for s in of_kind(objects, "ResourceSlice")
        if (s.get("spec") or {}).get("nodeName") == name and s["spec"].get("driver") == driver
    )
    return allocatable_count(node) + published


def gpu_paths(view: dict, gpu_handler: str = "nvidia") -> list:
    """How a GPU can reach a container through this runtime: ``handler`` (the GPU handler is
    loaded), ``cdi`` (CDI is on, with a spec of GPU devices where the daemon reads them: the GPU
    Operator's CDI and NRI ways, and DRA's), ``oci-hook`` (CRI-O reads NVIDIA's OCI hook, which
    hands every container its GPUs: the GPU Operator's way on CRI-O without CDI).

        gpu_paths(view) -> ["handler", "cdi"]
    """
    cdi = view.get("cdi") or {}
    return [
        p
        for p, on in (
            ("handler", gpu_handler in view["loaded"]),
            ("cdi", bool(cdi.get("enabled") and cdi.get("gpu_specs"))),
            ("oci-hook", bool(view.get("gpu_hooks"))),
        )
        if on
    ]


def _cdi_refusal(version: str, whose: str) -> str:
    """What containerd ``version`` does with ``whose`` CDI device request while CDI is off."""
    if release(version) < (2,):
        return f"drops {whose} CDI device request silently: it starts without a GPU"
    return (
        f"refuses {whose} CDI device request"
        if release(version) >= (2, 3)
        else f"does not resolve {whose} CDI device request"
    )


def _dra_findings(name: str, view: dict, objects: list, driver: str) -> list:
    """Pods bound to the node whose claims were allocated GPUs (DRA): the driver hands containerd
    CDI devices, which it resolves only with CDI on."""
    cdi = view.get("cdi")
    if view["loaded_from"] not in LIVE or cdi is None or cdi["enabled"]:
        return []
    gaps = []
    refusal, claims = _cdi_refusal(view["version"], "the claim's"), claims_of(objects)
    for pod in of_kind(objects, "Pod"):
        if pod["spec"].get("nodeName") != name or not active(pod):
            continue
        for claim, devices in dra_gpus(pod, claims, driver):
            gaps.append(
                gap(
                    "dra-claim-cdi-off",
                    ref(pod),
                    ["scheduled", "loaded"],
                    f"Pod {ref(pod)}'s claim {claim} was allocated {driver} device(s) "
                    f"{', '.join(devices)} on {name}, which its driver hands {view['runtime']} {view['version']} "
                    f"as CDI devices, and CDI is off (enable_cdi), so it {refusal}",
                )
            )
    return gaps


def _toolkit_pod(pod) -> bool:
    return any(
        o.get("kind") == "DaemonSet" and TOOLKIT_MARK in o.get("name", "")
        for o in pod["metadata"].get("ownerReferences") or []
    )


def node_bound_findings(
    name: str,
    node: dict,
    view: dict,
    objects: list,
    gpu_handler: str,
    events: list | None = None,
    gpu_driver: str = DRIVER,
) -> list:
    """The gaps of a runtime joined with the cluster's view of its node: the API's own view of
    loaded, the Pods bound to it (by RuntimeClass, by ``nvidia.com/gpu``, by a DRA claim), the
    GPUs it offers and the toolkit Pod that is Ready on it. A node whose GPUs CDI delivers (the
    GPU Operator's CDI and NRI ways: CDI on, a GPU spec) needs no GPU handler of its own."""
    gaps = api_disagrees(node, view) + _pod_findings(name, view, objects, events)
    if view["loaded_from"] in LIVE:
        gaps += _gpu_pods_without_a_class(name, view, objects, gpu_handler)
    gaps += _dra_findings(name, view, objects, gpu_driver)
    knows = view["loaded_from"] in JUDGED
    if knows and not gpu_paths(view, gpu_handler):
        gpus = node_gpus(node, objects, gpu_driver)
        if gpus:
            gaps.append(
                gap(
                    "gpu-advertised-not-loaded",
                    name,
                    ["scheduled", "loaded"],
                    f"node {name} offers {gpus} GPU(s) but its {view['runtime']} neither loads "
                    f"{gpu_handler} nor resolves CDI devices of GPUs",
                )
            )
        for pod in of_kind(objects, "Pod"):
            if pod["spec"].get("nodeName") == name and _toolkit_pod(pod) and ready(pod):
                gaps.append(
                    gap(
                        "toolkit-ready-not-loaded",
                        ref(pod),
                        ["scheduled", "loaded"],
                        f"toolkit Pod {ref(pod)} is Ready on {name} while {view['runtime']} does not "
                        f"load {gpu_handler}: Ready says the toolkit wrote its drop-in, not that "
                        "anything loaded it",
                    )
                )
    return gaps


def findings(
    view: dict,
    objects: list,
    node_name: str = "",
    gpu_handler: str = "nvidia",
    events: list | None = None,
    gpu_driver: str = DRIVER,
) -> list:
    """Every gap of one runtime: its own (``runtime_findings``), and, where it serves a node of
    the cluster (``node_name``), those joined with that node's objects.

    + view: the runtime's view (``gpuop.judgment.view``: ``lab_view``, ``node_view`` or ``api_view``)
    + objects: the cluster's Nodes, RuntimeClasses and Pods, plain JSON as the API gives them
    + node_name: the Node this runtime serves; empty: none (a lab host whose nodes are kwok's)
    + gpu_handler: the runtime handler GPU Pods need
    + events: the node's Events, where they were read: a failing sandbox is then held against the
      kubelet's own word; None: not read
    + gpu_driver: the DRA driver whose allocated devices are GPUs

        findings(node_view(read), objects, "gpu-a")
        -> [{"kind": "restart-takes-cri-down", "subject": "containerd", ...}, {"kind": "sandbox-fails", ...}]
    """
    gaps = []
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == node_name), None)
    if node_name and node is None:
        gaps.append(
            gap(
                "no-node-object",
                node_name,
                ["scheduled"],
                f"no Node named {node_name} in the cluster: set node_name for this host",
            )
        )
    if view["daemon"] is None and view["loaded_from"] == "none":
        if view["kubelet_endpoint"]:
            where = f" on kubelet's endpoint {view['kubelet_endpoint']}"
        elif view["others"]:
            where = " on the default socket, and no kubelet runs to say which of its containerds serves"
        else:
            where = ""
        if view["unread"]:  # a daemon whose flags were not read may be the one
            return gaps + unread_gaps(view)
        return gaps + [
            gap(
                "no-containerd",
                node_name or RUNTIME,
                ["loaded"],
                f"no containerd runs{where}: no Pod can start on this node",
            )
        ]
    gaps += runtime_findings(view)
    if node is not None:
        gaps += node_bound_findings(node_name, node, view, objects, gpu_handler, events, gpu_driver)
    return gaps


def judge(
    view: dict, objects: list, node_name: str = "", gpu_handler: str = "nvidia", gpu_driver: str = DRIVER
) -> dict:
    """The one door to the judgment of one runtime: its gaps (``findings``, the Events among
    ``objects`` held against its sandboxes) in its entry (``node_entry``). Every caller asks here:
    the lab audit, the node audit, the repair's plan and its audit after.

        judge(node_view(read), objects, "gpu-a")["gaps"]
        -> [{"kind": "sandbox-refuses-loaded", "subject": "ml/train", ...}]
    """
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == node_name), None)
    gaps = findings(view, objects, node_name, gpu_handler, events=of_kind(objects, "Event"), gpu_driver=gpu_driver)
    return node_entry(view, gaps, node, objects, gpu_handler, gpu_driver)


def gpus_held(name: str, pods: list) -> int:
    """The GPUs (``nvidia.com/gpu``) the active Pods bound to node ``name`` hold."""
    return sum(gpus_asked(p) for p in pods if p["spec"].get("nodeName") == name and active(p))


def overcommitted(node: dict, pods: list) -> dict | None:
    """The gap of a Node whose active Pods hold more GPUs than it advertises; None where they fit.

    overcommitted(node, pods) -> {"kind": "gpus-overcommitted", "subject": "gpu-a", ...}
    """
    name, advertised = node["metadata"]["name"], allocatable_count(node)
    asked = gpus_held(name, pods)
    if asked <= advertised:
        return None
    return gap(
        "gpus-overcommitted", name, ["scheduled"], f"node {name}: Pods hold {asked} GPUs, it advertises {advertised}"
    )


def unloaded_class(rc: dict, loaded: list, pods: list) -> dict | None:
    """The gap of a RuntimeClass whose handler the one runtime of a lab host does not load, naming
    the Pods of that class; None where it loads it. (On a fleet, ``cluster_gaps`` asks whether any
    judged runtime loads it.)

        unloaded_class({"metadata": {"name": "nvidia"}, "handler": "nvidia"}, ["runc"], pods)
        -> {"kind": "runtimeclass-handler-not-loaded", "subject": "nvidia", ...}
    """
    if rc["handler"] in loaded:
        return None
    name = rc["metadata"]["name"]
    users = [ref(p) for p in pods if p["spec"].get("runtimeClassName") == name]
    return gap(
        "runtimeclass-handler-not-loaded",
        name,
        ["scheduled", "loaded"],
        f"RuntimeClass {name}: handler {rc['handler']} not loaded; its Pods fail as soon as they are "
        f"recreated: {', '.join(users) or 'none now'}",
    )


def time_slicing_gaps(node: dict, replicas: int, time_slicing: dict) -> tuple:
    """The time-sliced node's gap and warning: it advertising other than its physical GPUs times the
    replicas of its time-slicing ConfigMap (``time-slicing-mismatch``; none where it agrees), and its
    slots sharing each GPU's whole memory (``time-sliced-memory-shared``: by design, a warning).

    + time_slicing: {"physical_gpus", "vram_per_gpu_gib", "configmap": "ns/name"}

        time_slicing_gaps(node, 4, {"physical_gpus": 2, "vram_per_gpu_gib": 80, "configmap": "gpu/ts"})
        -> ([{"kind": "time-slicing-mismatch", ...}], [{"kind": "time-sliced-memory-shared", ...}])
    """
    name, advertised = node["metadata"]["name"], allocatable_count(node)
    expected = time_slicing["physical_gpus"] * replicas
    warning = gap(
        "time-sliced-memory-shared",
        name,
        ["scheduled"],
        f"node {name}: {replicas} time-sliced slots per GPU share the GPU's whole "
        f"{time_slicing['vram_per_gpu_gib']} GiB; a slot is guaranteed 0 GiB, with no memory or fault "
        "isolation (time-slicing's design, not a fault to repair)",
    )
    mismatch = (
        []
        if advertised == expected
        else [
            gap(
                "time-slicing-mismatch",
                name,
                ["written", "scheduled"],
                f"node {name} advertises {advertised} GPUs, but {time_slicing['configmap']} gives "
                f"{time_slicing['physical_gpus']} x {replicas} = {expected}",
            )
        ]
    )
    return mismatch, [warning]


def stalled_rollout(ds: dict, pods: list) -> dict | None:
    """The gap of a DaemonSet whose rollout went as far as it can and is not complete (an updated
    Pod no node takes); None where it is complete or still moving.

        stalled_rollout(toolkit, pods) -> {"kind": "rollout-stalled", "subject":
            "gpu-operator/nvidia-container-toolkit", ...}
    """
    if not rollout_settled(ds, pods) or rollout_complete(ds):
        return None
    status = rollout_status(ds, pods)
    return gap(
        "rollout-stalled",
        ref(ds),
        ["scheduled"],
        f"DaemonSet {ref(ds)}: rollout stalled at {status['UPDATED']}/"
        f"{status['DESIRED']} updated, blocker {status['BLOCKER']}",
    )


def node_of(pod: dict) -> str:
    """The node a Pod is bound to, or, unscheduled, the one node its DaemonSet meant it for (the
    controller's required affinity on ``metadata.name``); "" where neither.

        node_of({"spec": {"nodeName": "gpu-a"}}) -> "gpu-a"
    """
    meant = (
        jmespath.search(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[].matchFields[?key=='metadata.name'][].values[]",
            pod,
        )
        or []
    )
    return pod["spec"].get("nodeName") or (meant[0] if len(meant) == 1 else "")


def cluster_gaps(entries: dict, objects: list) -> list:
    """The gaps of the cluster around its judged runtimes (``entries``: node name -> ``judge``'s
    entry): RuntimeClasses whose handler none of them loads, and, on those nodes, Pods that hold
    more GPUs than the node advertises and DaemonSet rollouts stalled there (the toolkit's: the
    seed's step 8). A node or DaemonSet elsewhere in the cluster is not the fleet's.

        cluster_gaps({"gpu-a": {"loaded": ["runc"], ...}}, objects)
        -> [{"kind": "runtimeclass-handler-nowhere", ...}, {"kind": "rollout-stalled", ...}]
    """
    loaded = {h for n in entries.values() for h in n["loaded"]}
    pods = of_kind(objects, "Pod")
    gaps = [
        gap(
            "runtimeclass-handler-nowhere",
            rc["metadata"]["name"],
            ["scheduled", "loaded"],
            f"RuntimeClass {rc['metadata']['name']}: no audited node loads its handler {rc.get('handler')}",
        )
        for rc in of_kind(objects, "RuntimeClass")
        if rc.get("handler") not in loaded
    ]
    gaps += [
        g for g in (overcommitted(n, pods) for n in of_kind(objects, "Node") if n["metadata"]["name"] in entries) if g
    ]
    ours = [ds for ds in of_kind(objects, "DaemonSet") if any(node_of(p) in entries for p in owned_pods(ds, pods))]
    return gaps + [g for g in (stalled_rollout(ds, pods) for ds in ours) if g]


def pods_at_risk(gaps: list) -> int:
    """How many Pods a node's gaps name (cannot start, will not after a restart, or run without
    their GPU)."""
    return len({g["subject"] for g in gaps if g["kind"] in AT_RISK})


def node_entry(
    runtime: dict,
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
    container there (``gpu_paths``); ``gpus``: the GPUs it offers (``node_gpus``).

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
        "gaps": gaps,
    }
