"""The audit of a real GPU node, a named deploy: written against loaded against after a restart
against scheduled. Only this audit reads the cluster through the kubernetes client (a second to
import), so only audit.py on a real node's inventory imports this module.

    audit_node(node)   # pyinfra nodes.py audit.py
"""

from pyinfra.api import deploy

from runbook.audit import node_audit


@deploy("Audit a real node: written against loaded against after restart against scheduled")
def audit_node(node, reporter: bool = False):
    """Each node reads itself and the cluster; the reporter (``reporter``: the fleet's own host on
    this machine, nodes.py) only reports, after every node."""
    if reporter and node.reach == "agent":  # no node contacted: the cluster's Nodes, as their agents say them
        node_audit.report_from_agents(
            name="Findings",
            report=node.report,
            kubeconfig=node.kubeconfig,
            context=node.kube_context,
            cluster_timeout_s=node.cluster_read_timeout_s,
            heartbeat_s=node.agent_heartbeat_s,
        )
        return
    if not reporter:
        node_audit.judge_node(
            name="Read the node and the cluster",
            node_name=node.node_name,
            gpu_handler=node.gpu_handler,
            gpu_driver=node.gpu_driver,
            crictl=node.crictl_binary,
            kubeconfig=node.kubeconfig,
            context=node.kube_context,
            read_timeout_s=node.node_read_timeout_s,
            cluster_timeout_s=node.cluster_read_timeout_s,
        )
    node_audit.report_fleet(
        name="Findings",
        report=node.report,
        textfile=node.textfile,
        kubeconfig=node.kubeconfig,
        context=node.kube_context,
        cluster_timeout_s=node.cluster_read_timeout_s,
    )
