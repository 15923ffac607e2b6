"""The agent's Events on its Node, said as client-go's EventCorrelator and recorder say them: the
same Event again is counted on the one already written (``count``, ``lastTimestamp``), not
written anew; more than ``SIMILAR_MAX`` Events of one reason with other messages within
``SIMILAR_S`` are aggregated into one; a token bucket per Node (``BURST``, one token back every
``REFILL_S``) drops a storm; an Event whose write fails is tried again at the next turn, up to
``TRIES`` times.

    sink = EventSink(api, "gpu-a")
    sink.say(condition)   # queued, correlated
    sink.flush()          # written: a create, or a patch of the count
"""

import collections
import json
import logging
import time
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.condition import MESSAGE_MAX, short

LOG = logging.getLogger("gpuop.agent")
COMPONENT = "gpuop-agent"  # its Events' source
NAMESPACE = "default"  # where Events about a Node go, as the kubelet's and node-problem-detector's
SIMILAR_MAX = 10  # client-go's maxSimilarEvents
SIMILAR_S = 600  # client-go's aggregate interval
BURST, REFILL_S = 25, 300  # client-go's spam filter: 25 at once, one more every 5 minutes
SEEN_MAX = 4096  # client-go's LRU of Events already written
TRIES = 12  # client-go's maxTriesPerEvent


class Correlator:
    """Which write an Event asks for, by client-go's rules: ``("create", event)``, ``("patch",
    event)`` (counted on one written before: ``count`` and ``name`` set) or ``None`` (dropped by
    the spam filter). Pure: ``now`` is given.

        c = Correlator(); c.correlate(event, 0.0)[0] -> "create"; c.correlate(event, 1.0)[0] -> "patch"
    """

    def __init__(self):
        self.seen = collections.OrderedDict()  # (object, reason, type, message) -> (name, count, first)
        self.similar = {}  # (object, reason, type) -> (first seen, {messages})
        self.tokens, self.filled = float(BURST), None

    def _allowed(self, now: float) -> bool:
        if self.filled is not None:
            self.tokens = min(BURST, self.tokens + (now - self.filled) / REFILL_S)
        self.filled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True

    def correlate(self, event: dict, now: float) -> tuple | None:
        obj = event["involvedObject"]
        group = (obj["kind"], obj["name"], event["reason"], event["type"])
        first, messages = self.similar.get(group, (now, set()))
        if now - first > SIMILAR_S:
            first, messages = now, set()
        messages.add(event["message"])
        self.similar[group] = (first, messages)
        if len(messages) > SIMILAR_MAX:
            event = {**event, "message": f"(combined from similar events): {event['message']}"}
            key = group  # every aggregated Event is one, counted
        else:
            key = (*group, event["message"])
        if not self._allowed(now):
            return None
        if key in self.seen:
            name, count, began = self.seen.pop(key)
            self.seen[key] = (name, count + 1, began)
            return "patch", {**event, "metadata": {**event["metadata"], "name": name}, "count": count + 1}
        return "create", {**event, "count": 1, "_key": key}

    def written(self, key: tuple, name: str, count: int = 1):
        """An Event written as ``name``: the next like it is counted on it."""
        self.seen.pop(key, None)
        self.seen[key] = (name, count, time.time())
        while len(self.seen) > SEEN_MAX:
            self.seen.popitem(last=False)

    def forget(self, key: tuple):
        """An Event the server no longer has (its TTL passed): the next like it is created anew."""
        self.seen.pop(key, None)


RESTORED = "written again: another writer removed or changed it"  # an Event's words for a condition restored


def event_of(node: str, condition: dict, now: datetime, restored: bool = False) -> dict:
    """An Event on the Node for a change of one of its conditions, as node-problem-detector writes
    them: its reason the condition's, its message the condition's type and status, then its
    message (two conditions may say the same reason: ``NoGap``); ``restored``: the condition was
    written back over another writer's change, and says so.

        event_of("gpu-a", {"type": "gpuop.io/GPURuntimeProblem", "status": "False", ...}, now)["message"]
        -> "GPURuntimeProblem False: the runtime loads what is written ..."
    """
    again = f" ({RESTORED})" if restored else ""
    said = f"{short(condition['type'])} {condition['status']}{again}: {condition['message']}"
    return {
        "metadata": {"generateName": f"{node}.gpuop-", "namespace": NAMESPACE},
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": condition["reason"],
        "message": said if len(said) <= MESSAGE_MAX else said[: MESSAGE_MAX - 3] + "...",
        "type": "Normal" if condition["status"] == "False" else "Warning",
        "source": {"component": COMPONENT, "host": node},
        "firstTimestamp": now,
        "lastTimestamp": now,
    }


class EventSink:
    """The Events of one node's agent: correlated, written, and tried again where a write fails."""

    def __init__(self, api: client.ApiClient, node: str):
        self.core, self.node = client.CoreV1Api(api), node
        self.correlator, self.pending = Correlator(), collections.deque()

    def say(self, condition: dict, restored: bool = False):
        """An Event for ``condition``'s change (``restored``: written back over another writer's),
        queued for ``flush``."""
        now = datetime.now(UTC)
        said = self.correlator.correlate(event_of(self.node, condition, now, restored), time.monotonic())
        if said is not None:
            self.pending.append([*said, 0])

    def flush(self):
        """Each queued Event written; one that fails stays queued, tried again at the next flush,
        dropped after ``TRIES`` (logged)."""
        for _ in range(len(self.pending)):
            verb, event, tries = self.pending.popleft()
            try:
                self._write(verb, event)
            except Exception as e:  # noqa: BLE001 (kept and tried again: an Event is not lost to one failure)
                if tries + 1 >= TRIES:
                    LOG.warning("node %s: Event %s dropped after %d tries: %s", self.node, event["reason"], TRIES, e)
                else:
                    self.pending.append([verb, event, tries + 1])

    def _write(self, verb: str, event: dict):
        if verb == "patch":
            body = {"count": event["count"], "lastTimestamp": event["lastTimestamp"]}
            try:
                self.core.patch_namespaced_event(event["metadata"]["name"], NAMESPACE, body, _preload_content=False)
                return
            except ApiException as e:
                if e.status != 404:
                    raise
            key = next((k for k, v in self.correlator.seen.items() if v[0] == event["metadata"]["name"]), None)
            if key is not None:
                self.correlator.forget(key)
            event = {**event, "metadata": {"generateName": f"{self.node}.gpuop-", "namespace": NAMESPACE}, "_key": key}
        key = event.get("_key")
        body = {k: v for k, v in event.items() if k != "_key"}
        made = self.core.create_namespaced_event(NAMESPACE, body, _preload_content=False)
        if key is not None:
            self.correlator.written(key, json.loads(made.data)["metadata"]["name"], body.get("count", 1))
