"""The rules of a runtime joined with the cluster's view of the node it serves: the API's own view
of loaded, the Pods bound to it (by RuntimeClass, by ``nvidia.com/gpu``, by a DRA claim), the GPUs it
offers and the toolkit Pod Ready on it. Subjects: a Pod ``namespace/name``, a Node its name."""

from gpuop.judgment import crio
from gpuop.judgment.cluster import active, allocatable_count, classed_pods, gpus_asked, ready
from gpuop.judgment.containerd import release
from gpuop.judgment.gaps import gap
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.sandbox import kubelet_agrees, refused_while_loaded, sandbox_refusal
from gpuop.judgment.view import JUDGED, LIVE, api_handlers
from gpuop.judgment.viewtype import View

TOOLKIT_MARK = "container-toolkit"  # the toolkit DaemonSet's name holds it (GPU Operator's and the lab's)


DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver: the devices it allocates are GPUs


def api_disagrees(node: dict, view: View) -> list:
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


def _pod_findings(name: str, view: View, objects: list, events: list | None) -> list:
    """Pods bound to the node whose RuntimeClass's handler is not loaded (their sandbox fails, in
    the version's words and, where Events were read, against the kubelet's own), or will not be
    after a restart."""
    gaps, version, loaded_from, rt = [], view["version"], view["loaded_from"], view["runtime"]
    knows = loaded_from in JUDGED
    restart_ok = view["cri_after_restart"] == "ok"
    refused = {ref(p): said for p, _, _, said in refused_while_loaded(name, view, objects, events or [])}
    for pod, rc, handler in classed_pods(name, objects):
        if knows and handler not in view["loaded"]:
            why = _why_no_sandbox(view, pod, handler, events)
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


def _why_no_sandbox(view: View, pod: dict, handler: str, events: list | None) -> str:
    """Why a Pod's sandbox fails where its handler is not loaded: CRI down, the API's word alone, or
    the runtime's own refusal, held against the kubelet's where Events were read."""
    if view["loaded_from"] == "cri-down":
        return "its CRI is down"
    if view["loaded_from"] == "api":
        return (
            f"its kubelet reports only {','.join(view['loaded']) or 'none'} loaded "
            "(Node.status.runtimeHandlers; the node itself was not read)"
        )
    refusal = sandbox_refusal(view, handler)
    why = f"{view['runtime']} {view['version']} says: {refusal}"
    if events is None:
        return why
    said = kubelet_agrees(pod, events, refusal)
    if said["agrees"]:
        return why + "; the kubelet's event agrees"
    return why + (
        f"; the kubelet's event says otherwise: {said['event']}" if said["event"] else "; no kubelet event for it yet"
    )


def _gpu_pods_without_a_class(name: str, view: View, objects: list, gpu_handler: str) -> list:
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


def gpu_paths(view: View, gpu_handler: str = "nvidia") -> list:
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


def _dra_findings(name: str, view: View, objects: list, driver: str) -> list:
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
    view: View,
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
