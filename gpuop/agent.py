"""The node agent: the one judgment of its own node, every ``interval_s``, said where the cluster
listens, in node-problem-detector's contract: a Node condition (``gpuop.judgment.condition``), an Event on
the Node at each change, and metrics on a port.

    python -m gpuop.agent --node gpu-a                          # on the node itself (or in a host-PID Pod:
    python -m gpuop.agent --node gpu-a --enter "nsenter -t 1 -m -u -i -p --"   # the host's namespaces)

Each judgment reads the node with the fleet audit's own script (``gpuop/reach/node_read.sh``, one
command, under a deadline) and the node's objects from the API server by field-selected reads
only: its Node, the Pods bound to it, its ResourceSlices, the claims and the sandbox Events of its
Pods (no cluster-wide list of Pods or Events); the RuntimeClasses, which every node shares, are
listed once and then kept by a watch. An API server away is
waited out: the agent logs it and judges again at the next interval.
"""

import argparse
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, start_http_server

from gpuop.judgment.cluster import SANDBOX_FAILED, has_sandbox
from gpuop.judgment.condition import CONDITION, condition_in, condition_of, next_condition
from gpuop.judgment.rules import DRIVER, judge
from gpuop.judgment.view import node_view
from gpuop.reach.kubeapi import api_client, bounded, in_words
from gpuop.reach.node_read import node_read, parse

LOG = logging.getLogger("gpuop.agent")
REQUEST_DEADLINE_S = 10  # each request to the API server
COMPONENT = "gpuop-agent"  # its Events' source


def read_node(enter: list, crictl: str, deadline_s: float) -> tuple:
    """The node's one read (``gpuop.reach.node_read``), run through ``enter`` (a command that enters the
    host's namespaces; empty: here): (the read, "") or (None, why it was not read).

        read_node(["nsenter", "-t", "1", "-m", "-u", "-i", "-p", "--"], "crictl", 150)
    """
    command = node_read(crictl)  # the package's own files: a missing one is said as itself, not as the read's
    try:
        done = subprocess.run(
            [*enter, "sh", "-c", command], capture_output=True, text=True, timeout=deadline_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return None, f"the node's read did not end within {deadline_s:.0f}s"
    except OSError as e:
        return None, f"the node's read could not start: {e.strerror} ({' '.join(enter) or 'sh'})"
    if done.returncode != 0:
        return None, f"the node's read failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}"
    return parse(done.stdout.splitlines()), ""


def _plain(api: client.ApiClient, obj, kind: str) -> dict:
    return {**api.sanitize_for_serialization(obj), "kind": kind}


class RuntimeClasses:
    """The cluster's RuntimeClasses, the one kind every node's judgment shares: listed once, then
    kept by a watch in a thread of its own, so that a judgment sends no cluster-wide read. Where
    the watch loses its place (the API server away, its version expired), they are listed again.

        classes = RuntimeClasses(api); classes.now(); classes.start()  # now() -> [{"kind": "RuntimeClass", ...}]
    """

    WATCH_S = 300  # each watch request's own end, as the API server bounds it (timeoutSeconds)
    RETRY_S = 5  # after a failed list or watch

    def __init__(self, api: client.ApiClient):
        self.api, self.items, self.version, self.watching = api, {}, None, None

    def _list(self):
        answer = client.NodeV1Api(self.api).list_runtime_class()
        self.items = {rc.metadata.name: _plain(self.api, rc, "RuntimeClass") for rc in answer.items}
        self.version = answer.metadata.resource_version

    def now(self) -> list:
        """The RuntimeClasses as last seen; listed here where they never were."""
        if self.version is None:
            self._list()
        return list(self.items.values())

    def _watch(self):
        stream = watch.Watch().stream(
            client.NodeV1Api(self.api).list_runtime_class,
            resource_version=self.version,
            timeout_seconds=self.WATCH_S,
            _request_timeout=(10, self.WATCH_S + 30),
        )
        for event in stream:
            rc = event["object"]
            if event["type"] == "ERROR":  # 410 Gone: the version expired
                self.version = None
                return
            if event["type"] == "DELETED":
                self.items.pop(rc.metadata.name, None)
            else:
                self.items[rc.metadata.name] = _plain(self.api, rc, "RuntimeClass")
            self.version = rc.metadata.resource_version

    def _keep(self):
        while True:
            try:
                if self.version is None:
                    self._list()
                self._watch()
            except Exception as e:  # noqa: BLE001 (the API server away: listed again once it answers)
                LOG.warning(
                    "the RuntimeClasses' watch stopped: %s; listed again in %ds",
                    in_words(e, self.WATCH_S),
                    self.RETRY_S,
                )
                self.version = None
                time.sleep(self.RETRY_S)

    def start(self):
        """The watch's thread, once: started after the first judgment's list, it watches from there
        (started before, it would list them a second time beside that judgment)."""
        if self.watching is None:
            self.watching = threading.Thread(target=self._keep, name="runtimeclasses", daemon=True)
            self.watching.start()


def node_objects(api: client.ApiClient, node: str, classes: RuntimeClasses) -> list:
    """The objects the judgment of ``node`` joins, plain, read by field selector or by name: its
    Node, the Pods bound to it, its ResourceSlices and its Pods' claims (where the cluster serves
    DRA), and the sandbox failures said of its Pods that have none; and the RuntimeClasses as
    ``classes`` keeps them."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    objects = [_plain(api, core.read_node(node), "Node")]
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    objects += [_plain(api, p, "Pod") for p in pods]
    objects += classes.now()
    for pod in objects[1 : 1 + len(pods)]:
        if not has_sandbox(pod):
            meta = pod["metadata"]
            said = core.list_namespaced_event(
                meta["namespace"],
                field_selector=(f"involvedObject.name={meta['name']},involvedObject.kind=Pod,reason={SANDBOX_FAILED}"),
            ).items
            objects += [_plain(api, e, "Event") for e in said]
    try:
        objects += [
            _plain(api, s, "ResourceSlice")
            for s in resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
        ]
        for pod in pods:
            for claim in (pod.status.resource_claim_statuses or []) + (pod.spec.resource_claims or []):
                name = getattr(claim, "resource_claim_name", None)
                if name:
                    objects.append(
                        _plain(
                            api, resource.read_namespaced_resource_claim(name, pod.metadata.namespace), "ResourceClaim"
                        )
                    )
    except ApiException as e:
        if e.status != 404:  # 404: no DRA served here
            raise
    return objects


class Metrics:
    """The agent's series: each gap kind found (1) or not (0), each handler per view, the last
    judgment's time and duration, the reads that failed."""

    def __init__(self, registry: CollectorRegistry):
        self.gap = Gauge(
            "gpuop_agent_gap", "A gap of this kind on the node (1) or none (0)", ["kind"], registry=registry
        )
        self.handler = Gauge(
            "gpuop_agent_handler",
            "A runtime handler in a view of the node's runtime (1)",
            ["handler", "view"],
            registry=registry,
        )
        self.condition = Gauge(
            "gpuop_agent_condition", "The node's condition (1 for its status)", ["status"], registry=registry
        )
        self.last = Gauge(
            "gpuop_agent_last_judgment_timestamp_seconds", "When the node was last judged", registry=registry
        )
        self.took = Gauge("gpuop_agent_judgment_duration_seconds", "How long the last judgment took", registry=registry)
        self.failures = Counter(
            "gpuop_agent_read_failures", "Judgments whose node or objects were not read", ["what"], registry=registry
        )
        self.judgments = Counter("gpuop_agent_judgments", "Judgments made", registry=registry)
        self.requests = Counter("gpuop_agent_api_requests", "Requests to the API server", ["verb"], registry=registry)
        ProcessCollector(registry=registry)  # its CPU seconds and resident memory, as every exporter's

    def counted(self, api: client.ApiClient) -> client.ApiClient:
        """``api``, each of its requests counted by verb (``gpuop_agent_api_requests_total``)."""
        request = api.rest_client.request

        def counting(method, *args, **kwargs):
            self.requests.labels(method).inc()
            return request(method, *args, **kwargs)

        api.rest_client.request = counting
        return api

    def judged(self, entry: dict | None, status: str, seconds: float):
        kinds = {g["kind"] for g in (entry or {}).get("gaps", [])}
        for sample in self.gap.collect()[0].samples:  # a kind seen before and gone now: 0
            self.gap.labels(sample.labels["kind"]).set(0)
        for kind in kinds:
            self.gap.labels(kind).set(1)
        self.handler.clear()
        for view, key in (("written", "written"), ("loaded", "loaded"), ("after-restart", "after_restart")):
            for handler in (entry or {}).get(key) or []:
                self.handler.labels(handler, view).set(1)
        for state in ("True", "False", "Unknown"):
            self.condition.labels(state).set(1 if state == status else 0)
        self.last.set(time.time())
        self.took.set(seconds)
        self.judgments.inc()


def said(api: client.ApiClient, node: str, condition: dict, namespace: str = "default"):
    """An Event on the Node for a change of its condition, as node-problem-detector writes them."""
    now = datetime.now(UTC)
    body = {
        "metadata": {"generateName": f"{node}.gpuop-", "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": condition["reason"],
        "message": condition["message"],
        "type": "Normal" if condition["status"] == "False" else "Warning",
        "source": {"component": COMPONENT, "host": node},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    client.CoreV1Api(api).create_namespaced_event(namespace, body)


def judge_once(
    api,
    node: str,
    enter: list,
    crictl: str,
    handler: str,
    driver: str,
    read_deadline_s: float,
    metrics: Metrics,
    classes: RuntimeClasses,
) -> dict:
    """One judgment of ``node``, said: the condition written where it changed or is due, an Event
    where it changed. Returns the condition written or kept."""
    started = time.monotonic()
    read, unread = read_node(enter, crictl, read_deadline_s)
    if read is None:
        metrics.failures.labels("node").inc()
    objects = node_objects(api, node, classes)
    entry = judge(node_view(read), objects, node, handler, driver) if read is not None else None
    wanted = condition_of(entry, unread)
    old = condition_in(objects[0])  # the Node, read with the objects: no request of its own
    written, why = next_condition(old, wanted, datetime.now(UTC))
    if why:
        client.CoreV1Api(api).patch_node_status(node, {"status": {"conditions": [written]}})
    if why == "changed":
        said(api, node, written)
        LOG.info("node %s: %s %s: %s", node, CONDITION, written["status"], written["message"])
    metrics.judged(entry, written["status"], time.monotonic() - started)
    return written


def client_of(kubeconfig: str) -> client.ApiClient:
    """The agent's client: its Pod's ServiceAccount in a cluster, else ``kubeconfig``."""
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return bounded(configuration, REQUEST_DEADLINE_S)
    return api_client(kubeconfig, "", REQUEST_DEADLINE_S)


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuop-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this node's name (default $NODE_NAME)")
    parser.add_argument("--interval-s", type=float, default=60, help="seconds between judgments")
    parser.add_argument("--port", type=int, default=9909, help="the metrics' port (0: none)")
    parser.add_argument("--enter", default="", help="the command that enters the host's namespaces (in a host-PID Pod)")
    parser.add_argument("--crictl", default="crictl")
    parser.add_argument("--gpu-handler", default="nvidia")
    parser.add_argument("--gpu-driver", default=DRIVER)
    parser.add_argument("--read-deadline-s", type=float, default=150, help="the node's read's deadline")
    parser.add_argument("--kubeconfig", default="", help="default: the Pod's ServiceAccount, else $KUBECONFIG")
    parser.add_argument("--once", action="store_true", help="judge once and exit (0: no gap, 1: a gap, 2: unknown)")
    a = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not a.node:
        parser.error("--node (or $NODE_NAME) is required: the node this agent judges")
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    if a.port:
        start_http_server(a.port, registry=registry)
    api = metrics.counted(client_of(a.kubeconfig))
    enter = shlex.split(a.enter)
    classes = RuntimeClasses(api)
    while True:
        try:
            written = judge_once(
                api, a.node, enter, a.crictl, a.gpu_handler, a.gpu_driver, a.read_deadline_s, metrics, classes
            )
            if a.once:
                return {"False": 0, "True": 1}.get(written["status"], 2)
            classes.start()
        except Exception as e:  # noqa: BLE001 (an API server away is waited out: the agent lives on)
            metrics.failures.labels("cluster").inc()
            LOG.warning("node %s: not judged this time: %s", a.node, in_words(e, REQUEST_DEADLINE_S))
            if a.once:
                return 2
        time.sleep(a.interval_s)


if __name__ == "__main__":
    sys.exit(main())
