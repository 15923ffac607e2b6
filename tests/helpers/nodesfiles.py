"""Nodes files for the simulated fleet, as an operator writes them: its hosts listed, or only
the settings for all (the cluster lists its GPU nodes); their known_hosts beside them."""

import os

import yaml

from tests.helpers.fleetobjects import MARK
from tests.helpers.labcontainerd import crictl


def _write_nodes_file(nodes, key: str, path: str, **rest) -> str:
    """A nodes file at ``path`` for ``nodes``: the SSH settings for all (their known_hosts beside
    it), and ``rest`` (its hosts, or what the cluster's listing takes)."""
    known = os.path.join(os.path.dirname(path), "known_hosts")
    with open(known, "w") as f:
        f.write("".join(f"[127.0.0.1]:{n.port} {n.host_key}\n" for n in nodes))
    doc = {
        "defaults": {"ssh_user": "root", "ssh_key": key, "ssh_known_hosts_file": known, "crictl_binary": crictl()},
        **rest,
    }
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def defaults_file(nodes, key: str, path: str, knobs: dict | None = None) -> str:
    """A nodes file with no hosts: the cluster lists the fleet's GPU nodes (by its label), each
    reached at its InternalIP with the settings for all, and its own sshd's port as its override,
    with ``knobs`` (node name -> knobs) on top."""
    # a registered node's InternalIP is this machine's (kubelet refuses loopback); its sshd, loopback's
    return _write_nodes_file(
        nodes,
        key,
        path,
        node_selector=f"{MARK}=true",
        overrides={
            n.name: {
                "ssh_port": n.port,
                **n.knobs,
                **({"ssh_hostname": "127.0.0.1"} if n.registered else {}),
                **(knobs or {}).get(n.name, {}),
            }
            for n in nodes
        },
    )


def nodes_file(nodes, key: str, path: str, node_names: dict) -> str:
    """The nodes file an operator would write for ``nodes`` (and their known_hosts beside it)."""
    hosts = {
        f"ssh-{n.name}": {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": n.port,
            **n.knobs,
            **({"node_name": node_names[n.name]} if n.name in node_names else {}),
        }
        for n in nodes
    }
    return _write_nodes_file(nodes, key, path, hosts=hosts)
