"""A sandbox that fails, in the runtime's words and the kubelet's: what the view's runtime answers the
kubelet for a handler it does not hold (containerd's words in ``gpuop.judgment.containerd``, CRI-O's in
``gpuop.judgment.crio``), whether a kubelet's event says it, and the Pods whose handler is loaded and
refused all the same (CRI-O after a reload)."""

import re

from gpuop.judgment import crio
from gpuop.judgment.cluster import classed_pods, event_epoch, has_sandbox, said_by_kubelet, sandbox_failure
from gpuop.judgment.containerd import sandbox_error
from gpuop.judgment.view import LIVE
from gpuop.judgment.viewtype import View


def sandbox_refusal(view: View, handler: str) -> str:
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


def refuses(view: View, handler: str, message: str) -> bool:
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


def refused_while_loaded(name: str, view: View, objects: list, events: list) -> list:
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
