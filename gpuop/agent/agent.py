"""The agent's loop: the node's runtime read on its own clock (every interval, jittered), the
cluster's side from watches (``gpuop.agent.watched``), and a judgment at each read and within a
second of each change the API server announces (a GPU Pod bound, a RuntimeClass changed, a
ResourceSlice published). A judgment sends no read: its Node, Pods, RuntimeClasses and
ResourceSlices are the watches'; only a Pod newly without a sandbox has its sandbox Events looked
up, and a Pod's ResourceClaims are read once per version of that Pod. It writes only when the
condition changes or its heartbeat is due, and says each change in an Event.

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
from gpuop.agent.flags import AgentFlags, FlagError, parse_flags
from gpuop.agent.forget import ForgetError, forget
from gpuop.agent.gate import RestartGate
from gpuop.agent.health import Health, serve
from gpuop.agent.metrics import Metrics
from gpuop.agent.noderead import NodeRead
from gpuop.agent.watched import node_watches
from gpuop.judgment.cluster import SANDBOX_FAILED, has_sandbox
from gpuop.judgment.condition import RESTART_UNSAFE, condition_in, conditions_of, next_condition, overall
from gpuop.judgment.rules import judge
from gpuop.judgment.view import node_view
from gpuop.reach.kubeapi import api_client, bounded, in_words

LOG = logging.getLogger("gpuop.agent")
REQUEST_DEADLINE_S = 10  # each request to the API server
JITTER = 0.1  # each interval lengthened by up to this part of it; the first judgment within it
SETTLE_S = 0.5  # after a change is announced, for the rest of its burst, judged once
SYNC_S = 30  # --once: how long the watches may take to list
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
    names them (a claim allocated changes its Pod's status, so its Pod's version with it)."""

    def __init__(self, api: client.ApiClient):
        self.resource, self.known, self.served = client.ResourceV1Api(api), {}, True

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
            if not names or not self.served:
                continue
            meta = pod["metadata"]
            key = (meta["uid"], meta.get("resourceVersion"))
            if key not in self.known:
                try:
                    self.known[key] = [self._claim(n, meta["namespace"]) for n in names]
                except ApiException as e:
                    if e.status != 404:
                        raise
                    self.served = False  # no DRA served here
                    continue
            kept[key] = self.known[key]
        self.known = kept
        return [c for claims in kept.values() for c in claims if c is not None]

    def _claim(self, name: str, namespace: str) -> dict:
        answer = self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False)
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
        self.changed = threading.Event()
        self.watched = node_watches(api, flags.node, lambda kind: self.changed.set())
        self.sandboxes = SandboxEvents(self.core, flags.interval_s, flags.heartbeat_s)
        self.claims = Claims(api)
        self.events = EventSink(api, flags.node)
        self.health = Health(flags.health_bound_s, self.watched.values())
        self.gate = RestartGate(self.core, flags.node, flags.pod, flags.pod_namespace)
        self.answer, self.sent = None, {}

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
        """Forever: the node read at each tick of its clock, judged then and at each change."""
        self.start()
        tick = time.monotonic() + random.uniform(0, JITTER * self.flags.interval_s)
        while True:
            wait = tick - time.monotonic()
            if wait > 0 and self.changed.wait(wait):
                time.sleep(SETTLE_S)
            self.changed.clear()
            if time.monotonic() >= tick:
                began = time.monotonic()
                self.read_node()
                tick = began + self.flags.interval_s * (1 + random.uniform(0, JITTER))
            self.turn()

    def once(self) -> dict | None:
        """One read, one judgment once the watches have listed; the conditions written or kept."""
        self.start()
        deadline = time.monotonic() + SYNC_S
        while not self.synced() and time.monotonic() < deadline:
            self.changed.wait(1)
        self.read_node()
        return self.turn()

    def turn(self) -> dict | None:
        """One judgment, said: its conditions by type; None where the cluster's side is not had
        (counted and logged)."""
        started = time.monotonic()
        try:
            written, entry = self.judged()
        except Exception as e:  # noqa: BLE001 (an API server away is waited out: the agent lives on)
            self.metrics.failures.labels("cluster").inc()
            LOG.warning("node %s: not judged this time: %s", self.flags.node, in_words(e, REQUEST_DEADLINE_S))
            written = None
        self.events.flush()
        self.health.judged()
        if written is not None:
            self.metrics.judged(entry, {kind: c["status"] for kind, c in written.items()}, time.monotonic() - started)
        return written

    def judged(self) -> tuple:
        """(the conditions written or kept, by type; the judgment's entry); (None, None) before the
        node's first read or the watches' first lists."""
        if self.answer is None or not self.synced():
            return None, None
        nodes = self.watched["Node"].items()
        if not nodes:
            raise LookupError(f"no Node named {self.flags.node} in the cluster")
        node, pods = nodes[0], self.watched["Pod"].items()
        objects = [node, *pods, *self.watched["RuntimeClass"].items(), *self.watched["ResourceSlice"].items()]
        objects += self.claims.of(pods) + self.sandboxes.of(pods)
        read = self.answer.read
        entry = None if read is None else judge(node_view(read), objects, self.flags.node, *self._asked())
        now, wanted = datetime.now(UTC), conditions_of(entry, self.answer.unread)
        said = [next_condition(self._old(node, w["type"]), w, now, self.flags.heartbeat_s) for w in wanted]
        if any(why for _, why in said):  # both written together: one PATCH a heartbeat, not one each
            said = [(c, why) if why else next_condition(c, w, now, 0) for (c, why), w in zip(said, wanted)]
        kept = {c["type"]: c for c, _ in said}
        writes = [c for c, why in said if why]
        changed = [c for c, why in said if why == "changed"]
        if writes:
            self.core.patch_node_status(self.flags.node, {"status": {"conditions": writes}}, _preload_content=False)
            self.sent.update({c["type"]: c for c in writes})
        for written in changed:
            self.events.say(written)
            LOG.info("node %s: %s %s: %s", self.flags.node, written["type"], written["status"], written["message"])
        self.gate.keep(kept[RESTART_UNSAFE]["status"], node, pods)
        return kept, entry

    def _asked(self) -> tuple:
        return self.flags.gpu_handler, self.flags.gpu_driver

    def _old(self, node: dict, kind: str) -> dict | None:
        """The condition ``kind`` as last written: the Node's, or the agent's own last write where
        the watch has not brought it back yet (only the agent writes it: the later heartbeat is its)."""
        seen, sent = condition_in(node, kind), self.sent.get(kind)
        if sent is None or (seen and seen.get("lastHeartbeatTime", "") >= sent["lastHeartbeatTime"]):
            return seen
        return sent


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
