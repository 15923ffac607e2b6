"""The repair of real GPU nodes, a named deploy: every node planned at once from the audit's own
judgment of it, then one rollout from this machine, one node at a time, drained, fixed,
restarted, proven and put back, stopped at the first failure. Like the node audit, only this
loads the kubernetes client.

    repair_node(node)   # pyinfra nodes.py fix.py
"""

from pyinfra.api import deploy

from runbook.repair import rollout


@deploy("Repair real nodes: planned, drained, fixed, restarted, proven, put back")
def repair_node(node, reporter: bool = False):
    """Each node plans its own repair (its read, the cluster's); the reporter (the fleet's host
    on this machine) then rolls the plans out."""
    if not reporter:
        rollout.planned_repair(name="The node's plan, from its own judgment", knobs=node)
    else:
        rollout.rolled_out(
            name="The rollout, one node at a time",
            kubeconfig=node.kubeconfig,
            context=node.kube_context,
            namespace=node.node_pod_namespace,
            report=node.report,
            textfile=node.textfile,
            max_unavailable=node.repair_max_unavailable,
            max_failures=node.repair_max_failures,
            lock_s=node.repair_lock_s,
        )
