"""The fleet audit's inventory: the hosts ``nodes.py`` hands pyinfra, from the nodes file, or
from the cluster's GPU nodes where the file lists none.

    gpu_nodes = fleet_hosts(sys.argv, os.environ)   # nodes.py
"""

import functools
import logging
import os
import runpy
from datetime import UTC, datetime

from gpuop.knobs import NODE_PARSERS, KnobError
from gpuop.reach.hosts import HostsFileError, read_text
from gpuop.reach.nodes_file import cli_data, cluster_hosts, flagged_by_agents, inventory_names, load_nodes
from runbook import PROJECT

GROUP_DATA = os.path.join(PROJECT, "group_data", "all.py")
CLUSTER_KEYS = ("kubeconfig", "kube_context", "cluster_read_timeout_s")
# An SSH handshake that stalls (a port that accepts and never speaks SSH) is given up by paramiko
# itself within this, below pyinfra's 10 s connect deadline: the node is then one line, "SSH error
# (Error reading SSH protocol banner)", where the deadline left "No existing session".
SSH_HANDSHAKE_S = 8
SSH_HANDSHAKE = {"banner_timeout": SSH_HANDSHAKE_S, "auth_timeout": SSH_HANDSHAKE_S}


@functools.cache
def _group_data() -> dict:
    return runpy.run_path(GROUP_DATA)


def _asked(nodes, argv, keys: tuple) -> dict:
    """Knobs the inventory itself needs (which cluster lists the GPU nodes, the read's deadline,
    where the nodes come from), parsed: group_data's defaults, the nodes file's, then ``--data``
    (pyinfra hands those to the hosts only after the inventory)."""
    asked = {**{k: _group_data()[k] for k in keys}, **nodes.defaults, **cli_data(argv, keys)}
    return {k: NODE_PARSERS[k](k, asked.get(k)) for k in keys}


def _cluster_read(nodes, argv, why: str) -> tuple:
    """The run's one read of the cluster (``read_for_inventory``: once a run, however often asked)
    and where it was read from; one that fails is one sentence, ending in ``why`` it was read.
    Only here does the inventory load the kubernetes client."""
    from gpuop.reach.kubeapi import ClusterUnreadable, read_for_inventory

    cluster = _asked(nodes, argv, CLUSTER_KEYS)
    try:
        return read_for_inventory(*(cluster[k] for k in CLUSTER_KEYS), nodes.node_selector)
    except ClusterUnreadable as e:
        raise NodesUnusable(f"{e}; {why}") from None


def _flagged(found: list, nodes, argv) -> list:
    """``nodes_from: agents``: of the hosts, only those whose node agent's condition says a gap,
    from one read of the cluster (the run's own read after, as where the cluster lists the nodes);
    each left out said in one line."""
    from pyinfra import logger

    from gpuop.judgment.condition import agents_report
    from gpuop.judgment.objects import of_kind

    # where the cluster listed the nodes, that same read
    objects, where = _cluster_read(nodes, argv, "nodes_from=agents takes the nodes from their agents' conditions there")
    heartbeat_s = _asked(nodes, argv, ("agent_heartbeat_s",))["agent_heartbeat_s"]
    kept, left = flagged_by_agents(found, agents_report(of_kind(objects, "Node"), datetime.now(UTC), heartbeat_s))
    logger.info(f"--> the nodes their agents say a gap of ({where}): {', '.join(n for n, _ in kept) or 'none'}")
    for line in left:
        logger.info(f"    not taken: {line}")
    return kept


class NodesUnusable(ValueError):
    """The nodes file or the cluster cannot give the fleet's hosts: one sentence, saying why."""


def fleet_hosts(argv: list, environ) -> list:
    """The inventory's hosts, ``[(name, data), ...]``: every node to audit (``gpuop_target``
    "node"), and the fleet's reporter on this machine (``gpuop_target`` "fleet": it reports the
    fleet whether or not any node answers, with the file's settings for all). A file or a
    cluster that cannot be used is one sentence (``NodesUnusable``), never a traceback.

        fleet_hosts(["pyinfra", "nodes.py", "audit.py"], {"GPUOP_NODES": "nodes.yaml"})
        -> [("gpu-a", {..., "gpuop_target": "node"}), ("@local", {"gpuop_target": "fleet"})]
    """
    source = environ.get("GPUOP_NODES") or "nodes.yaml"
    try:
        # how the nodes are reached decides their names here, so --data reach is read first
        given = {k: NODE_PARSERS[k](k, v) for k, v in cli_data(argv, ("reach",)).items()}
        if environ.get("GPUOP_NODES") or os.path.exists(source):
            nodes = load_nodes(
                read_text(source, "the nodes to audit", "nodes.example.yaml", "GPUOP_NODES"),
                source,
                NODE_PARSERS,
                given,
            )
        else:
            nodes = load_nodes("", "(no nodes file)", NODE_PARSERS, given)
        hosts = nodes.hosts
        if given.get("reach") == "agent":  # the Nodes' conditions alone: no node is a host
            return [("@local", {**nodes.settings(NODE_PARSERS), "reach": "agent", "gpuop_target": "fleet"})]
        if hosts is None:
            objects, where = _cluster_read(
                nodes,
                argv,
                "with no hosts in a nodes file, the GPU nodes are listed from "
                "the cluster (or list them: see nodes.example.yaml, GPUOP_NODES)",
            )
            hosts = cluster_hosts(objects, nodes, NODE_PARSERS, where)
        # paramiko's transport thread logs its own traceback for what pyinfra then says in one line
        logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
        found = [
            (name, {"ssh_paramiko_connect_kwargs": SSH_HANDSHAKE, **data, "gpuop_target": "node"})
            for name, data in inventory_names(hosts, source)
        ]
        if _asked(nodes, argv, ("nodes_from",))["nodes_from"] == "agents":
            found = _flagged(found, nodes, argv)
        return found + [("@local", {**nodes.settings(NODE_PARSERS), "gpuop_target": "fleet"})]
    except (HostsFileError, KnobError) as e:
        raise NodesUnusable(f"{source}: {e}" if isinstance(e, KnobError) else str(e)) from None
