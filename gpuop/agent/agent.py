"""The agent's loop: the node's runtime read on its own clock (every interval, jittered), the
cluster's side from two watches, its Node and its Pods (``gpuop.agent.watched``), and a judgment at
each read and soon after each change the API server announces: within a second for its own node's
(a GPU Pod bound), spread over the interval's jitter for one every agent hears at once (every watch
listed again after an API server came back), so that a fleet's agents do not all write in the same
second. A steady judgment sends no read: its Node and Pods are the watches', the RuntimeClasses and
ResourceSlices its Pods need are read when a new Pod needs them and kept (``gpuop.agent.kept``);
only a Pod newly without a sandbox has its sandbox Events looked up, and a Pod's ResourceClaims are
read once per version of that Pod. It writes only when the
condition changes or its heartbeat is due, and says each change in an Event; a condition someone
else removed or changed (the Node made again, a hand's patch, a heartbeat stamped in the future)
is written back at the next judgment, and said in an Event too.

    agent = Agent(api, flags, metrics)
    agent.run()          # forever; agent.once() -> the condition written
"""

import json
import logging
import os
import random
import sys
import threading
import time
from datetime import UTC, datetime

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from gpuop.agent.events import EventSink
from gpuop.agent.flags import REQUEST_DEADLINE_S, AgentFlags, FlagError, parse_flags
from gpuop.agent.forget import ForgetError, forget
from gpuop.agent.gate import RestartGate
from gpuop.agent.health import Health, serve
from gpuop.agent.kept import ResourceSlices, RuntimeClasses
from gpuop.agent.metrics import Metrics
from gpuop.agent.noderead import NodeRead
from gpuop.agent.watched import node_watches
from gpuop.judgment.cluster import SANDBOX_FAILED, has_sandbox
from gpuop.judgment.condition import RESTART_UNSAFE, condition_in, conditions_of, next_condition, overall
from gpuop.judgment.rules import judge
from gpuop.judgment.view import node_view
from gpuop.reach.kubeapi import api_client, bounded, in_words

LOG = logging.getLogger("gpuop.agent")
JITTER = 0.1  # each interval lengthened by up to this part of it; the first judgment within it
SETTLE_S = 0.5  # after a change is announced, for the rest of its burst, judged once
SYNC_S = 30  # how long the watches may take to list before the first judgment (--once's, the gate's)
TERMINAL = ("Succeeded", "Failed")


class SandboxEvents:
    """The kubelet's sandbox failures (``FailedCreatePodSandBox``) of the node's Pods that have no
    sandbox: looked up for a Pod newly without one, then again after ``first_s``, and after
    twice that each time, at most every ``most_s``, while it stays without one; never for a Pod
    with a sandbox or a terminal one, and forgotten once it has one."""

    def __init__(self, core: client.CoreV1Api, first_s: float, most_s: float, clock=time.monotonic):
        self.core, self.first_s, self.most_s, self.clock = core, first_s, most_s, clock
        self.known = {}  # Pod uid -> {"events", "next", "period"}

    def of(self, pods: list) -> list:
        now, kept = self.clock(), {}
        for pod in pods:
            if has_sandbox(pod) or (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            meta = pod["metadata"]
            known = self.known.get(meta["uid"]) or {"events": [], "next": now, "period": self.first_s}
            if now >= known["next"]:
                said = self.core.list_namespaced_event(
                    meta["namespace"],
                    field_selector=f"involvedObject.uid={meta['uid']},reason={SANDBOX_FAILED}",
                    _preload_content=False,
                )
                known["events"] = [{**e, "kind": "Event"} for e in _items(said)]
                known["next"], known["period"] = now + known["period"], min(2 * known["period"], self.most_s)
            kept[meta["uid"]] = known
        self.known = kept
        return [e for known in kept.values() for e in known["events"]]


class Claims:
    """The ResourceClaims of the node's Pods, read by name once for each version of the Pod that
    names them (a claim allocated changes its Pod's status, so its Pod's version with it); a claim
    not found is a fact of that claim (none to judge: deleted, not made yet, or no DRA served
    here), asked again at its Pod's next version."""

    def __init__(self, api: client.ApiClient):
        self.resource, self.known = client.ResourceV1Api(api), {}

    def of(self, pods: list) -> list:
        kept = {}
        for pod in pods:
            names = sorted(
                {
                    c.get("resourceClaimName")
                    for c in ((pod.get("status") or {}).get("resourceClaimStatuses") or [])
                    + ((pod.get("spec") or {}).get("resourceClaims") or [])
                }
                - {None}
            )
            if not names:
                continue
            meta = pod["metadata"]
            key = (meta["uid"], meta.get("resourceVersion"))
            if key not in self.known:
                self.known[key] = [self._claim(n, meta["namespace"]) for n in names]
            kept[key] = self.known[key]
        self.known = kept
        return [c for claims in kept.values() for c in claims if c is not None]

    def _claim(self, name: str, namespace: str) -> dict | None:
        try:
            answer = self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise
            return None  # not there (deleted, not made yet): this claim is not judged
        return {**_json(answer), "kind": "ResourceClaim"}


def _json(answer) -> dict:
    return json.loads(answer.data)


def _items(answer) -> list:
    return _json(answer).get("items") or []


class Agent:
    """One node's agent: its watches, its node's read, its condition, Events and health."""

    def __init__(self, api: client.ApiClient, flags: AgentFlags, metrics: Metrics, read=None):
        self.api, self.flags, self.metrics = api, flags, metrics
        self.core = client.CoreV1Api(api)
        self.read = read or NodeRead(flags.enter, flags.crictl, flags.read_deadline_s)
        self.changed, self.lock, self.due = threading.Event(), threading.Lock(), None
        self.watched = node_watches(api, flags.node, self.announced)
        self.sandboxes = SandboxEvents(self.core, flags.interval_s, flags.heartbeat_s)
        self.claims = Claims(api)
        self.classes, self.slices = RuntimeClasses(api), ResourceSlices(api, flags.node)
        self.events = EventSink(api, flags.node)
        self.health = Health(flags.health_bound_s, self.watched.values())
        self.gate = RestartGate(self.core, flags.node, flags.pod, flags.pod_namespace)
        self.answer, self.sent, self.written_at = None, {}, None

    def announced(self, kind: str, listed: bool):
        """A watch's change: judged ``SETTLE_S`` after it (the rest of its burst with it), or, where
        every agent of the fleet hears it at once (a whole list again, the first change after a
        watch broke: an API server back), at a time drawn over the interval's jitter."""
        after = random.uniform(SETTLE_S, max(SETTLE_S, JITTER * self.flags.interval_s)) if listed else SETTLE_S
        with self.lock:
            due = time.monotonic() + after
            self.due = due if self.due is None else min(self.due, due)
        self.changed.set()

    def start(self):
        for w in self.watched.values():
            w.start()

    def synced(self) -> bool:
        return all(w.synced.is_set() for w in self.watched.values())

    def read_node(self):
        self.answer = self.read()
        self.metrics.read(self.answer.cpu_s)
        if self.answer.read is None:
            self.metrics.failures.labels("node").inc()

    def run(self):
        """Forever: the node read at each tick of its clock, judged then and when a change is due;
        first, once the watches have listed, the gate as its Node holds it (a new agent's Pod on a
        gated node is gated before the node's first read, which may take its whole deadline)."""
        self.start()
        self._synced_within(SYNC_S)
        self.turn()
        tick = time.monotonic() + random.uniform(0, JITTER * self.flags.interval_s)
        while True:
            with self.lock:
                wake = tick if self.due is None else min(tick, self.due)
            if wake > time.monotonic():
                self.changed.wait(wake - time.monotonic())
            self.changed.clear()
            now = time.monotonic()
            if now >= tick:
                self.read_node()
                tick = now + self.flags.interval_s * (1 + random.uniform(0, JITTER))
            else:
                with self.lock:
                    if self.due is None or now < self.due:
                        continue  # woken to look again at when the next is due
            with self.lock:
                self.due = None
            self.turn()

    def once(self) -> dict | None:
        """One read, one judgment once the watches have listed; the conditions written or kept."""
        self.start()
        self._synced_within(SYNC_S)
        self.read_node()
        return self.turn()

    def _synced_within(self, seconds: float):
        deadline = time.monotonic() + seconds
        while not self.synced() and time.monotonic() < deadline:
            self.changed.wait(1)
            self.changed.clear()

    def turn(self) -> dict | None:
        """One judgment, said: its conditions by type; None where the cluster's side is not had
        or what was judged could not be written (counted and logged)."""
        started = time.monotonic()
        try:
            written, entry = self.judged()
            unwritten = ""
        except Exception as e:  # noqa: BLE001 (an API server away is waited out: the agent lives on)
            self.metrics.failures.labels("cluster").inc()
            unwritten = in_words(e, REQUEST_DEADLINE_S)
            LOG.warning("node %s: not judged this time: %s", self.flags.node, unwritten)
            written = None
        self.events.flush()
        self.health.judged(unwritten)
        if written is not None:
            self.metrics.judged(entry, {kind: c["status"] for kind, c in written.items()}, time.monotonic() - started)
        return written

    def judged(self) -> tuple:
        """(the conditions written or kept, by type; the judgment's entry); (None, None) before the
        watches' first lists or the node's first read (the gate then kept as its Node holds it)."""
        if not self.synced():
            return None, None
        nodes = self.watched["Node"].items()
        if not nodes:
            raise LookupError(f"no Node named {self.flags.node} in the cluster")
        node, pods = nodes[0], self.watched["Pod"].items()
        if self.answer is None:
            self.gate.keep("Unknown", node, pods)
            return None, None
        objects = [node, *pods, *self.classes.of(pods), *self.slices.of(pods)]
        objects += self.claims.of(pods) + self.sandboxes.of(pods)
        read = self.answer.read
        entry = None if read is None else judge(node_view(read), objects, self.flags.node, *self._asked())
        now, wanted = datetime.now(UTC), conditions_of(entry, self.answer.unread)
        said = [self._next(node, w, now) for w in wanted]
        if any(why for _, why in said):  # both written together: one PATCH a heartbeat, not one each
            said = [(c, why) if why else next_condition(c, w, now, 0) for (c, why), w in zip(said, wanted)]
        kept = {c["type"]: c for c, _ in said}
        writes = [c for c, why in said if why]
        if writes:
            answer = self.core.patch_node_status(
                self.flags.node, {"status": {"conditions": writes}}, _preload_content=False
            )
            self.sent.update({c["type"]: c for c in writes})
            self.written_at = (_json(answer)["metadata"]["resourceVersion"], self.watched["Node"].lists)
        for written, why in said:
            if why in ("changed", "restored"):
                self.events.say(written, restored=why == "restored")
                LOG.info(
                    "node %s: %s %s (%s): %s",
                    self.flags.node,
                    written["type"],
                    written["status"],
                    why,
                    written["message"],
                )
        self.gate.keep(kept[RESTART_UNSAFE]["status"], node, pods)
        return kept, entry

    def _asked(self) -> tuple:
        return self.flags.gpu_handler, self.flags.gpu_driver

    def _next(self, node: dict, wanted: dict, now: datetime) -> tuple:
        """The condition ``wanted`` to write over the Node's, and why (``next_condition``'s, or
        ``restored``): while the watch has not brought the agent's own last write back, that write
        is the Node's; once it has, a condition that is not what the agent last wrote (removed,
        changed, its heartbeat moved: the Node made again, another writer) is written again."""
        seen, sent = condition_in(node, wanted["type"]), self.sent.get(wanted["type"])
        if sent is None:  # nothing written by this agent yet: the Node's is the last word
            return next_condition(seen, wanted, now, self.flags.heartbeat_s)
        if not self._caught_up():
            return next_condition(sent, wanted, now, self.flags.heartbeat_s)
        if seen is None or any(seen.get(k) != sent.get(k) for k in _WRITTEN):
            condition, why = next_condition(sent, wanted, now, 0)
            return condition, "changed" if why == "changed" else "restored"
        return next_condition(seen, wanted, now, self.flags.heartbeat_s)

    def _caught_up(self) -> bool:
        """Whether the Node's watch has brought back the version the agent's last write made (or
        listed the Node again since: a list is the Node as it is)."""
        if self.written_at is None:
            return True
        version, lists = self.written_at
        node = self.watched["Node"]
        if version in node.versions or node.lists > lists or any(version == _version(o) for o in node.items()):
            self.written_at = None
        return self.written_at is None


def _version(obj: dict) -> str:
    return obj["metadata"].get("resourceVersion", "")


_WRITTEN = ("status", "reason", "message", "lastTransitionTime", "lastHeartbeatTime")  # a condition, as written


def client_of(kubeconfig: str) -> client.ApiClient:
    """The agent's client: its Pod's ServiceAccount in a cluster, else ``kubeconfig``."""
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return bounded(configuration, REQUEST_DEADLINE_S)
    return api_client(kubeconfig, "", REQUEST_DEADLINE_S)


def main(argv: list | None = None) -> int:
    """The agent, from its flags: 2 and one sentence on a bad one."""
    try:
        flags = parse_flags(argv)
    except FlagError as e:
        print(f"gpuop-agent: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    try:
        api = metrics.counted(client_of(flags.kubeconfig))
    except Exception as e:  # noqa: BLE001 (one sentence: a kubeconfig missing or unreadable)
        print(f"gpuop-agent: --kubeconfig: the cluster's client could not be made: {e}", file=sys.stderr)
        return 2
    if flags.forget:
        try:
            forget(api, flags.forget, say=lambda words: print(f"gpuop-agent: {words}", flush=True))
        except ForgetError as e:
            print(f"gpuop-agent: --forget {flags.forget}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # noqa: BLE001 (one sentence: the API server refused or did not answer)
            print(f"gpuop-agent: --forget {flags.forget}: {in_words(e, REQUEST_DEADLINE_S)}", file=sys.stderr)
            return 1
        return 0
    agent = Agent(api, flags, metrics)
    if flags.port:
        serve(flags.port, registry, agent.health)
    if flags.once:
        written = agent.once()
        return {"False": 0, "True": 1}.get(overall([c["status"] for c in (written or {}).values()]), 2)
    agent.run()
    return 0
