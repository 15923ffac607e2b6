"""The restart gate: while the node's next start would break it (``RESTART_UNSAFE`` True), the
label ``GATE`` on the agent's own Pod (kured's ``--blocking-pod-selector`` then holds that node's
reboot, and no other's) and on its Node (a system-upgrade-controller Plan selects nodes by label);
both taken off when it turns False, and left as they are while it is Unknown: not knowing is no
reason to let a reboot through that was held, nor to hold one that was let. The Node's label is the
gate's memory: a new agent Pod (a rolling update, an eviction, a crash) on a gated Node is gated
from its start, before its first judgment, and stays so while it is Unknown. A label is written
only where the watches show it otherwise, and once per version of its object.

    gate = RestartGate(core, "gpu-a", "gpuop-agent-x1z2", "gpuop-system")
    gate.keep("True", node, pods)   # the label put on the Node and the agent's Pod where missing
"""

from kubernetes import client

from gpuop.judgment.condition import GATE


class RestartGate:
    """The gate's labels on one node: its Node, and the agent's Pod where it runs in one."""

    def __init__(self, core: client.CoreV1Api, node: str, pod: str = "", namespace: str = ""):
        self.core, self.node, self.pod, self.namespace = core, node, pod, namespace
        self.patched = {}  # "Node" or "Pod" -> the version it had when its label was last written

    def keep(self, status: str, node: dict, pods: list):
        """The labels as ``status`` (RESTART_UNSAFE's; anything but True and False: not known) asks,
        ``node`` and ``pods`` as the watches last said them."""
        own = self._own(pods)
        if status not in ("True", "False"):  # not known: the Pod gated where its Node is, nothing lifted
            if own is not None and _gated(node) and not _gated(own):
                self._label_pod(own, "true")
            return
        wanted = "true" if status == "True" else None
        self._label("Node", node, wanted, lambda body: self.core.patch_node(self.node, body, _preload_content=False))
        if own is not None:
            self._label_pod(own, wanted)

    def _own(self, pods: list) -> dict | None:
        return next(
            (
                p
                for p in pods
                if self.pod and p["metadata"]["name"] == self.pod and p["metadata"].get("namespace") == self.namespace
            ),
            None,
        )

    def _label_pod(self, own: dict, wanted: str | None):
        self._label(
            "Pod",
            own,
            wanted,
            lambda body: self.core.patch_namespaced_pod(self.pod, self.namespace, body, _preload_content=False),
        )

    def _label(self, what: str, obj: dict, wanted: str | None, patch):
        meta = obj["metadata"]
        if (meta.get("labels") or {}).get(GATE) == wanted:
            return
        if self.patched.get(what) == meta.get("resourceVersion"):  # written; the watch has not said so yet
            return
        patch({"metadata": {"labels": {GATE: wanted}}})
        self.patched[what] = meta.get("resourceVersion")


def _gated(obj: dict) -> bool:
    return (obj["metadata"].get("labels") or {}).get(GATE) == "true"
