"""The agent's series: each gap kind found (1) or not (0), each handler per view, each condition's
status, the last judgment's time and duration, the node's read's CPU, the reads that failed, and
its requests to the API server by verb (a watch counted as ``WATCH``, apart from the reads).

    metrics = Metrics(CollectorRegistry()); api = metrics.counted(api)
"""

import time

from kubernetes import client
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector

from gpuop.judgment.condition import short


class Metrics:
    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.gap = Gauge("gpuop_agent_gap", "A gap of this kind on the node (1) or none (0)", ["kind"], registry=r)
        self.handler = Gauge(
            "gpuop_agent_handler",
            "A runtime handler in a view of the node's runtime (1)",
            ["handler", "view"],
            registry=r,
        )
        self.condition = Gauge(
            "gpuop_agent_condition",
            "The node's conditions (1 for each one's status)",
            ["condition", "status"],
            registry=r,
        )
        self.last = Gauge("gpuop_agent_last_judgment_timestamp_seconds", "When the node was last judged", registry=r)
        self.took = Gauge("gpuop_agent_judgment_duration_seconds", "How long the last judgment took", registry=r)
        self.read_cpu = Counter(
            "gpuop_agent_node_read_cpu_seconds",
            "CPU the node's reads took on the node (their processes, user and system)",
            registry=r,
        )
        self.reads = Counter("gpuop_agent_node_reads", "Reads of the node", registry=r)
        self.failures = Counter(
            "gpuop_agent_read_failures", "Judgments whose node or objects were not read", ["what"], registry=r
        )
        self.judgments = Counter("gpuop_agent_judgments", "Judgments made", registry=r)
        self.requests = Counter("gpuop_agent_api_requests", "Requests to the API server", ["verb"], registry=r)
        ProcessCollector(registry=r)  # its CPU seconds and resident memory, as every exporter's

    def counted(self, api: client.ApiClient) -> client.ApiClient:
        """``api``, each of its requests counted by verb (``gpuop_agent_api_requests_total``)."""
        request = api.rest_client.request

        def counting(method, *args, **kwargs):
            watching = any(k == "watch" and v for k, v in kwargs.get("query_params") or [])
            self.requests.labels("WATCH" if watching else method).inc()
            return request(method, *args, **kwargs)

        api.rest_client.request = counting
        return api

    def read(self, cpu_s: float):
        self.reads.inc()
        self.read_cpu.inc(max(0.0, cpu_s))

    def judged(self, entry: dict | None, statuses: dict, seconds: float):
        """One judgment said: its gaps, handlers, and ``statuses`` (each condition's, by type)."""
        kinds = {g["kind"] for g in (entry or {}).get("gaps", [])}
        for sample in self.gap.collect()[0].samples:  # a kind seen before and gone now: 0
            self.gap.labels(sample.labels["kind"]).set(0)
        for kind in kinds:
            self.gap.labels(kind).set(1)
        self.handler.clear()
        for view, key in (("written", "written"), ("loaded", "loaded"), ("after-restart", "after_restart")):
            for handler in (entry or {}).get(key) or []:
                self.handler.labels(handler, view).set(1)
        for kind, status in statuses.items():
            for state in ("True", "False", "Unknown"):
                self.condition.labels(short(kind), state).set(1 if state == status else 0)
        self.last.set(time.time())
        self.took.set(seconds)
        self.judgments.inc()
