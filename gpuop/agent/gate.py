"""The restart gate: while the node's next start would break it (``RESTART_UNSAFE`` True), the
label ``GATE`` on the agent's own Pod (kured's ``--blocking-pod-selector`` then holds that node's
reboot, and no other's) and on its Node (a system-upgrade-controller Plan selects nodes by label);
both taken off when it turns False, and left as they are while it is Unknown: not knowing is no
reason to let a reboot through that was held, nor to hold one that was let. A label is written only
where the watches show it otherwise, and once per version of its object.

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
        """The labels as ``status`` (RESTART_UNSAFE's) asks, ``node`` and ``pods`` as the watches
        last said them."""
        if status not in ("True", "False"):
            return
        wanted = "true" if status == "True" else None
        self._label("Node", node, wanted, lambda body: self.core.patch_node(self.node, body, _preload_content=False))
        own = next(
            (
                p
                for p in pods
                if self.pod and p["metadata"]["name"] == self.pod and p["metadata"].get("namespace") == self.namespace
            ),
            None,
        )
        if own is not None:
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
