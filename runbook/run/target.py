"""A host as a target: a lab host (``runbook.replay.lab_host``) or a real GPU node, and a node's knobs.

node = target.node_checked(host) if target.in_fleet(host) else None
"""

from pyinfra.api.exceptions import DeployError

from gpuop.knobs import KnobError, parse_node_knobs


def in_fleet(host) -> bool:
    """Whether the host is a real node (nodes.py), or the fleet's reporter beside them (this
    machine: it reports the fleet whether or not any node answers), not a lab host."""
    return host.data.get("gpuop_target") in ("node", "fleet")


def node_checked(host):
    """A real node's knobs, parsed and checked (a bad one stops the run naming host and key).

    node = node_checked(host)   # node.node_name -> "" (its hostname), node.gpu_handler -> "nvidia"
    """
    try:
        return parse_node_knobs(host.data)
    except KnobError as bad:
        raise DeployError(f"{host.name}: {bad} (nothing was read)") from None
