"""The audit of real nodes: each node read once, the cluster read once, the fleet reported once.

Hosts are prepared in parallel (pyinfra's greenlets); the first to ask reads the cluster from the
operator's kubeconfig, on this machine, and the others wait for that read. Every node's entry is
kept for the run; the first host to execute writes the fleet's JSON and textfile and logs its
table, so they hold every node of the run.
"""

from datetime import UTC, datetime

from gevent.lock import Semaphore
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import DeployError

from gpuop.judgment.cluster_rules import cluster_gaps, fleet_object_gaps
from gpuop.judgment.condition import agents_report, with_conditions
from gpuop.judgment.node_rules import DRIVER
from gpuop.judgment.objects import of_kind
from gpuop.judgment.rules import judge
from gpuop.judgment.view import api_view, node_view
from gpuop.outputs.tables import fleet_table
from gpuop.outputs.textfile import registry_of, write_reports
from gpuop.reach.kubeapi import ClusterUnreadable, inventory_read, read_cluster
from runbook.reach.node import NodeRuntime
from runbook.run.poll import failure
from runbook.run.state import run_of

AGENT_REACH_KINDS = ("Node", "Pod", "DaemonSet")  # the agent reach reads these alone: no node is contacted


class NodeAudit:
    """The node audit's part of a run (``runbook.run.state``): the cluster read once, each node's entry."""

    def __init__(self):
        self.lock = Semaphore()
        self.objects = None  # the cluster's objects, read once
        self.unreadable = None  # the DeployError of a read that failed: said once, for every host
        self.cluster = {}  # how it was read: context, requests, seconds
        self.nodes = {}  # node name -> its entry in the report
        self.hosts = {}  # pyinfra host name -> node name
        self.reported = False


def audit_of(state) -> NodeAudit:
    """This run's node audit, made at the first node's ask."""
    run = run_of(state)
    if run.node_audit is None:
        run.node_audit = NodeAudit()
    return run.node_audit


def cluster_objects(state, kubeconfig: str, context: str, deadline_s: float) -> list:
    """The cluster's objects for this run: the inventory's read of it, else read by the first
    host to ask while the others wait for it."""
    audit = audit_of(state)
    with audit.lock:
        if audit.unreadable is not None:
            raise audit.unreadable
        if audit.objects is None:
            listed = inventory_read(kubeconfig, context)
            try:
                audit.objects, audit.cluster = listed or read_cluster(kubeconfig, context, deadline_s)
            except ClusterUnreadable as e:
                audit.unreadable = DeployError(str(e))
                raise audit.unreadable from None
            logger.info(
                f"--> cluster read once for the fleet{' (it listed the GPU nodes)' if listed else ''}: "
                f"{len(audit.objects)} objects, {audit.cluster['requests']} list requests, "
                f"{audit.cluster['seconds']}s ({audit.cluster['from']}); DRA {audit.cluster['dra']}"
            )
    return audit.objects


def _whole(state, audit: NodeAudit) -> dict:
    """The run's report: every node's entry, the fleet's own gaps, how the cluster was read, and
    the hosts that were not read (their error is pyinfra's, above). A node not read whose kubelet
    reports its runtime's handlers is judged on them alone (``api_view``)."""
    unread = [h for h in state.inventory if h.data.get("gpuop_target") == "node" and h.name not in audit.hosts]
    nodes, from_api = dict(audit.nodes), {}
    for h in unread:
        name = h.data.get("node_name") or h.name
        node = next((o for o in audit.objects or [] if o["kind"] == "Node" and o["metadata"]["name"] == name), None)
        runtime = api_view(node) if node is not None and name not in nodes else None
        if runtime is not None:
            nodes[name] = judge(
                runtime, audit.objects, name, h.data.get("gpu_handler") or "nvidia", h.data.get("gpu_driver") or DRIVER
            )
            from_api[h.name] = name
    return {
        "nodes": {name: with_conditions(entry) for name, entry in sorted(nodes.items())},
        "gaps": cluster_gaps(nodes, audit.objects or []),
        "cluster": audit.cluster,
        "unread": sorted(h.name for h in unread),
        "judged_from_api": from_api,
    }


def _report_once(state, report_path: str, textfile_path: str) -> dict:
    audit = audit_of(state)
    report = _whole(state, audit)
    if not audit.reported:
        audit.reported = True
        write_reports(report, report_path, textfile_path, registry_of)
        for line in fleet_table(report):
            logger.info(line)
        alone = report["judged_from_api"]
        if set(report["unread"]) - set(alone):
            logger.error(f"not read, so not judged: {', '.join(h for h in report['unread'] if h not in alone)}")
        if alone:
            logger.error(
                "not read, judged on what its kubelet reports alone (Node.status.runtimeHandlers): "
                + ", ".join(f"{h} (node {n})" for h, n in sorted(alone.items()))
            )
        for where, path in (("JSON", report_path), ("textfile", textfile_path)):
            if path:
                logger.info(f"fleet {where}: {path}")
    return report


@operation()
def judge_node(
    node_name: str,
    gpu_handler: str,
    gpu_driver: str,
    crictl: str,
    kubeconfig: str,
    context: str,
    read_timeout_s: int,
    cluster_timeout_s: int,
):
    """
    Audit one real node, read-only: its containerd's three views, in one command on the node
    (``runbook.reach.node.NodeRuntime``), joined with the cluster read once for the run. The node's
    entry is kept for ``report_fleet``; nothing is changed anywhere, so this yields no command.
    A plan and its run (pyinfra without ``-y``) share the one read.

    + node_name: the node's name in the cluster; empty: the node's hostname
    + gpu_handler: the runtime handler GPU Pods need
    + gpu_driver: the DRA driver whose allocated devices are GPUs
    + crictl: crictl on the node
    + kubeconfig: the operator's kubeconfig on this machine; empty: the default
    + context: its context; empty: the current one
    + read_timeout_s: the deadline of the node's read
    + cluster_timeout_s: the deadline of the cluster's read, every page of it

    .. code:: python

        judge_node(node_name="", gpu_handler="nvidia", gpu_driver="gpu.nvidia.com", crictl="crictl", kubeconfig="",
                   context="prod", read_timeout_s=150, cluster_timeout_s=20)
    """
    audit = audit_of(host.state)
    if host.name not in audit.hosts:
        read = host.get_fact(NodeRuntime, crictl=crictl, deadline_s=read_timeout_s, _timeout=read_timeout_s)
        if host in host.state.failed_hosts:  # pyinfra said why (its deadline, a lost link): judge nothing
            yield failure(
                f"the node's read did not complete within node_read_timeout_s={read_timeout_s}s "
                "or failed: it is not judged"
            )
            return
        try:
            objects = cluster_objects(host.state, kubeconfig, context, cluster_timeout_s)
        except DeployError as e:
            yield failure(str(e))
            return
        name = node_name or read["hostname"] or host.name
        twin = next((h for h, n in audit.hosts.items() if n == name), None)
        if twin:
            yield failure(f"hosts {twin} and {host.name} both audit node {name}: set node_name for each")
            return
        audit.nodes[name] = judge(node_view(read), objects, name, gpu_handler, gpu_driver)
        audit.hosts[host.name] = name
    yield from ()


@operation(is_idempotent=False)
def report_fleet(report: str, textfile: str, kubeconfig: str, context: str, cluster_timeout_s: int):
    """
    Report the fleet, once all its nodes are read: the first host to get here writes the JSON
    and the textfile on this machine and logs the fleet's table; each node then fails on its
    gaps, and the reporter (the fleet's host on this machine, which runs whether or not any node
    answers, and reads the cluster if no node did) on the fleet's own and on the gaps of the
    nodes judged from the API alone, so the run's exit status gates a maintenance window.

    + report: the fleet's JSON on this machine; empty: none
    + textfile: the fleet in Prometheus' text format on this machine; empty: none
    + kubeconfig, context, cluster_timeout_s: the cluster, for the reporter's read

    .. code:: python

        report_fleet(report="fleet.json", textfile="/var/lib/node_exporter/textfile/gpuop.prom",
                     kubeconfig="", context="prod", cluster_timeout_s=20)
    """

    def judge(state, host):
        audit = audit_of(state)
        if host.name not in audit.hosts:  # the reporter
            try:
                cluster_objects(state, kubeconfig, context, cluster_timeout_s)
            except DeployError as e:
                logger.error(f"{host.print_prefix}{e}")
                return False
            report_now = _report_once(state, report, textfile)
            alone = sum(len(report_now["nodes"][n]["gaps"]) for n in report_now["judged_from_api"].values())
            for words, count in (
                ("of the fleet as a whole", len(report_now["gaps"])),
                ("on the nodes judged from the API alone", alone),
            ):
                if count:
                    logger.error(f"{host.print_prefix}fleet: {count} gap(s) {words}")
            return not (report_now["gaps"] or alone)
        report_now = _report_once(state, report, textfile)
        name = audit.hosts[host.name]
        gaps = report_now["nodes"][name]["gaps"]
        if gaps:
            logger.error(
                f"{host.print_prefix}node {name}: {len(gaps)} gap(s) between written, loaded, "
                "after restart and scheduled"
            )
        return not gaps

    yield FunctionCommand(judge, (), {})


@operation(is_idempotent=False)
def report_from_agents(report: str, kubeconfig: str, context: str, cluster_timeout_s: int, heartbeat_s: int):
    """
    Report the fleet from its node agents alone (``--data reach=agent``): one list of the
    cluster's Nodes, each GPU node judged by its agent's condition (``gpuop.judgment.condition``),
    no node contacted; beside them the cluster's Pods and DaemonSets, for the fleet's own rules
    (``fleet_object_gaps``: a stalled rollout, an overcommitted node). A node with a gap, or whose
    agent is missing or stale, or a gap of the fleet fails the run.

    + report: the JSON on this machine; empty: none
    + kubeconfig, context, cluster_timeout_s: the cluster, and its read's deadline
    + heartbeat_s: the agents' heartbeat: a condition older than two of them is stale

    .. code:: python

        report_from_agents(report="fleet.json", kubeconfig="", context="prod", cluster_timeout_s=20, heartbeat_s=300)
    """

    def judge(state, host):
        try:  # the Nodes, and the Pods and DaemonSets the fleet's own rules read
            objects, _ = read_cluster(kubeconfig, context, cluster_timeout_s, kinds=AGENT_REACH_KINDS)
        except ClusterUnreadable as e:
            logger.error(f"{host.print_prefix}{e}")
            return False
        nodes = of_kind(objects, "Node")
        found = agents_report(nodes, datetime.now(UTC), heartbeat_s)
        found["gaps"] = fleet_object_gaps(list(found["nodes"]), objects)
        write_reports(found, report, "", None)
        logger.info(f"--> the fleet as its agents say it (one list of {len(nodes)} Nodes):")
        if not found["nodes"]:
            logger.warning(
                f"{host.print_prefix}no GPU node: none of the {len(nodes)} Nodes advertises nvidia.com/gpu "
                "or carries the agent's condition"
            )
        for name, v in found["nodes"].items():
            said = "  ".join(f"{kind}={c['status']}" for kind, c in v["conditions"].items())
            logger.info(
                f"    {name}  agent {v['agent']}  {v['status'] or '-'}  {v['reason'] or '-'}  "
                f"heartbeat {v['heartbeat_age_s'] if v['heartbeat_age_s'] is not None else '-'}s ago"
                + (f"  {said}" if said else "")
            )
            for gap in v["gaps"]:
                logger.info(f"GAP {name}: [{gap['kind']}] {gap['detail']} (sets {gap['condition']})")
        for gap in found["gaps"]:
            logger.info(f"GAP fleet: [{gap['kind']}] {gap['detail']}")
        if found["unread"]:
            logger.error(f"{host.print_prefix}not judged, no live agent: {', '.join(found['unread'])}")
        failing = [n for n, v in found["nodes"].items() if v["status"] != "False"]
        if failing:
            logger.error(f"{host.print_prefix}{len(failing)} node(s) not healthy by their agents: {', '.join(failing)}")
        return not failing and not found["gaps"]

    yield FunctionCommand(judge, (), {})
