"""What a node's judgment needs beyond its two watches (its Node, its Pods: ``gpuop.agent.watched``),
read only when it is needed and kept, so that an agent costs the API server two watches and not
four: the RuntimeClasses its Pods name, each read by name when a Pod the agent has not seen names it
(a new class, or one whose handler changed, is judged with the first Pod that uses it); and its
ResourceSlices, listed by field selector where the cluster serves DRA and a Pod of the node claims
a device. Each is read again after ``REREAD_S``, drawn at random (what can change unannounced: a
class's handler under a Pod that runs, a driver's devices), and forgotten once no Pod needs it.

    classes = RuntimeClasses(api)
    classes.of(pods)   # [{"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}]
"""

import json
import random
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# Each kept read is read again after this many seconds, drawn between the two: what the API
# server's budget leaves (docs/agent.md, "Its load on the API server").
REREAD_S = (7200, 14400)


class Kept:
    """Objects read by ``read(key)`` when first asked for, or asked ``fresh``, or past their time
    (``REREAD_S``, drawn), and kept meanwhile."""

    def __init__(self, read, clock=time.monotonic, draw=random.uniform):
        self.read, self.clock, self.draw = read, clock, draw
        self.kept = {}  # key -> (objects, when they are read again)

    def get(self, key, fresh: bool = False) -> list:
        objects, due = self.kept.get(key, (None, 0.0))
        if fresh or objects is None or self.clock() >= due:
            objects = self.read(key)
            self.kept[key] = (objects, self.clock() + self.draw(*REREAD_S))
        return objects

    def only(self, keys):
        """Forget every key but ``keys`` (no Pod needs the rest)."""
        self.kept = {k: v for k, v in self.kept.items() if k in keys}


def _active(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class RuntimeClasses:
    """The RuntimeClasses the node's Pods name, each read by name: when a Pod not seen before names
    it, and again after its time; one not found is none (its Pods judged on their class's name)."""

    def __init__(self, api: client.ApiClient, clock=time.monotonic, draw=random.uniform):
        self.api, self.kept, self.seen = client.NodeV1Api(api), Kept(self._read, clock, draw), set()

    def _read(self, name: str) -> list:
        try:
            answer = self.api.read_runtime_class(name, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
            return []
        return [{**json.loads(answer.data), "kind": "RuntimeClass"}]

    def of(self, pods: list) -> list:
        named = {}  # class -> whether a Pod not seen before names it
        for pod in pods:
            name = (pod.get("spec") or {}).get("runtimeClassName")
            if name and _active(pod):
                named[name] = named.get(name, False) or pod["metadata"]["uid"] not in self.seen
        found = [c for name, fresh in sorted(named.items()) for c in self.kept.get(name, fresh)]
        self.kept.only(named)
        self.seen = {pod["metadata"]["uid"] for pod in pods}
        return found


class ResourceSlices:
    """The node's ResourceSlices, listed by field selector where a Pod of the node claims a device
    (DRA): when a claiming Pod not seen before is there, and again after their time. ``served``
    says whether the cluster serves DRA (a list answered 404: it does not; asked again after
    ``REREAD_S``)."""

    def __init__(self, api: client.ApiClient, node: str, clock=time.monotonic, draw=random.uniform):
        self.api, self.node = client.ResourceV1Api(api), node
        self.kept, self.seen, self.served = Kept(self._read, clock, draw), set(), True

    def _read(self, node: str) -> list:
        try:
            answer = self.api.list_resource_slice(field_selector=f"spec.nodeName={node}", _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
            self.served = False
            return []
        self.served = True
        return [{**s, "kind": "ResourceSlice"} for s in json.loads(answer.data).get("items") or []]

    def of(self, pods: list) -> list:
        claiming = {p["metadata"]["uid"] for p in pods if (p.get("spec") or {}).get("resourceClaims") and _active(p)}
        found = self.kept.get(self.node, bool(claiming - self.seen)) if claiming else []
        self.kept.only({self.node} if claiming else set())
        self.seen = claiming
        return found
