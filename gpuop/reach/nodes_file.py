"""The node audit's nodes file and the hosts it makes: the nodes a user lists, or the cluster's
GPU nodes (``gpu_nodes``), each with the file's settings, named as pyinfra's inventory names
them (over SSH, or ``@kubenode/NODE`` through the cluster).

    defaults: {ssh_user: ubuntu, ssh_key: ~/.ssh/id_ed25519}   # for every node
    hosts: {gpu-a: {ssh_hostname: 10.0.0.7}}                    # or none: the cluster lists them
    node_selector: pool=gpu                                     # which Nodes, as kubectl -l takes it
    overrides: {ip-10-0-0-7: {ssh_port: 2222}}                  # a listed node's own keys
"""

from dataclasses import dataclass

from gpuop.judgment.cluster import gpus_asked
from gpuop.judgment.driver_rules import KINDS as DRIVER_KINDS
from gpuop.judgment.node_rules import DRIVER, claims_of, dra_gpus, node_gpus
from gpuop.knobs import REACHES
from gpuop.reach.hosts import HostsFileError, host_data, yaml_document


@dataclass
class NodesFile:
    """A nodes file: its hosts (None: the cluster lists its GPU nodes), the settings for every
    node, each listed node's own (``overrides``, by Node name), and which Nodes to take."""

    source: str
    defaults: dict
    hosts: list | None
    overrides: dict
    node_selector: str
    given: dict  # the command line's knobs, above the file's

    def settings(self, knobs) -> dict:
        """The knobs its defaults set for every node (the cluster, the report), SSH settings aside.

        load_nodes("defaults: {ssh_user: u, kube_context: prod}", "nodes.yaml", NODE_PARSERS).settings(NODE_PARSERS)
        -> {"kube_context": "prod"}
        """
        return {k: v for k, v in self.defaults.items() if k in knobs}


def load_nodes(text: str, source: str, knobs, given: dict | None = None) -> NodesFile:
    """A nodes file's text, read: with ``hosts``, exactly those; without, the cluster's GPU nodes
    are audited (``cluster_hosts``), each with ``defaults`` and its ``overrides`` entry; ``given``
    (the command line's ``--data``) above them all.

        load_nodes("defaults: {ssh_user: ubuntu}\nnode_selector: pool=gpu\n", "nodes.yaml", NODE_PARSERS).hosts -> None
    """
    doc = yaml_document(text, source, ("defaults", "hosts", "overrides", "node_selector"))
    defaults = doc.get("defaults") or {}
    if not isinstance(doc.get("hosts") or {}, dict):
        raise HostsFileError(f"{source}: hosts must be a mapping of each host's name to its keys")
    if doc.get("hosts"):
        if doc.get("overrides") or doc.get("node_selector"):
            raise HostsFileError(
                f"{source}: overrides and node_selector apply to the nodes the cluster lists; "
                "with hosts listed, set each host's own keys"
            )
        hosts = [
            (name, host_data(name, {**defaults, **(spec or {}), **(given or {})}, source, "the node", knobs))
            for name, spec in doc["hosts"].items()
        ]
        return NodesFile(source, defaults, hosts, {}, "", given or {})
    overrides = doc.get("overrides") or {}
    for name, spec in overrides.items():
        if not isinstance(spec, dict):
            raise HostsFileError(f"{source}: overrides: {name} must be a mapping of that node's own keys")
    return NodesFile(source, defaults, None, overrides, str(doc.get("node_selector") or ""), given or {})


def gpu_nodes(objects: list, driver: str = DRIVER) -> list:
    """The cluster's GPU nodes, ``[(node name, address), ...]``: each Node that offers GPUs
    (``nvidia.com/gpu``, or devices of the DRA ``driver`` in its ResourceSlices) or has a Pod
    bound that asks for GPUs (by ``nvidia.com/gpu`` or a claim of ``driver``'s; the Nodes read are those the file's
    ``node_selector`` selects: the API server selects them); its address the InternalIP, else
    its first address, else its name.

        gpu_nodes(objects) -> [("ip-10-0-0-7", "10.0.0.7")]
    """
    claims = claims_of(objects)
    bound = {
        p["spec"].get("nodeName")
        for p in objects
        if p["kind"] == "Pod" and (gpus_asked(p) or dra_gpus(p, claims, driver))
    }
    found = []
    for node in (o for o in objects if o["kind"] == "Node"):
        name = node["metadata"]["name"]
        if not (node_gpus(node, objects, driver) or name in bound):
            continue
        addresses = (node.get("status") or {}).get("addresses") or []
        internal = [a["address"] for a in addresses if a.get("type") == "InternalIP"]
        found.append((name, (internal or [a["address"] for a in addresses] or [name])[0]))
    return sorted(found)


def cluster_hosts(objects: list, nodes: NodesFile, knobs, where: str) -> list:
    """The inventory's hosts for the cluster's GPU nodes (``gpu_nodes``): each named after its
    Node, reached at its address, with the file's defaults and its own overrides.

        cluster_hosts(objects, load_nodes(...), NODE_PARSERS, "kubeconfig ..., context prod")
        -> [("ip-10-0-0-7", {"ssh_hostname": "10.0.0.7", "node_name": "ip-10-0-0-7", ...})]
    """
    found = gpu_nodes(objects, nodes.defaults.get("gpu_driver") or DRIVER)
    if not found:
        chosen = f" whose labels match {nodes.node_selector}" if nodes.node_selector else ""
        raise HostsFileError(
            f"the cluster ({where}) has no GPU node{chosen} (a Node that advertises "
            "nvidia.com/gpu or has a GPU Pod bound): nothing to audit"
        )
    names = {name for name, _ in found}
    stray = sorted(set(nodes.overrides) - names)
    if stray:
        raise HostsFileError(
            f"{nodes.source}: overrides name {', '.join(stray)}, not a GPU node the cluster lists "
            f"({', '.join(sorted(names))})"
        )
    return [
        (
            name,
            host_data(
                name,
                {
                    "ssh_hostname": address,
                    **nodes.defaults,
                    "node_name": name,
                    **(nodes.overrides.get(name) or {}),
                    **nodes.given,
                },
                nodes.source,
                "the node",
                knobs,
            ),
        )
        for name, address in found
    ]


def inventory_names(hosts: list, source: str) -> list:
    """The hosts as pyinfra's inventory names them: a node read over SSH by its own name, one
    read through the cluster (``reach: cluster``) as ``@kubenode/NODE`` (runbook.reach.kubenode),
    NODE its ``node_name``, else the host's name. Two hosts on one node that way are refused.

        inventory_names([("gpu-a", {"reach": "cluster", "node_name": "ip-10-0-0-7"})], "nodes.yaml")
        -> [("@kubenode/ip-10-0-0-7", {"reach": "cluster", "node_name": "ip-10-0-0-7"})]
    """
    named, seen = [], {}
    for name, data in hosts:
        if data.get("reach", "ssh") not in REACHES:
            raise HostsFileError(
                f"{source}: host {name}: reach={data['reach']!r}: expected one of {', '.join(REACHES)} "
                "(its SSH login, or a short-lived Pod on it through the cluster)"
            )
        if data.get("reach") == "cluster":
            node = data.get("node_name") or name
            if node in seen:
                raise HostsFileError(
                    f"{source}: hosts {seen[node]} and {name} both read node {node} "
                    "through the cluster: one host per node"
                )
            seen[node] = name
            named.append((f"@kubenode/{node}", {**data, "node_name": node}))
        else:
            named.append((name, data))
    return named


def cli_data(argv: list, keys: tuple) -> dict:
    """The ``--data key=value`` pairs of ``keys`` on a pyinfra command line, as pyinfra reads
    them (an inventory runs before pyinfra hands them to the hosts).

        cli_data(["pyinfra", "nodes.py", "audit.py", "--data", "kube_context=prod"], ("kube_context",))
        -> {"kube_context": "prod"}
    """
    found = {}
    for flag, value in zip(argv, argv[1:]):
        if flag == "--data" and "=" in value:
            key, _, v = value.partition("=")
            if key in keys:
                found[key] = v
    return found


def flagged_by_agents(hosts: list, report: dict) -> tuple:
    """Of ``hosts`` (pyinfra's names and their data), those whose Node (``node_name``, else the
    host's name) its node agent says has a gap of the runtime's (``condition.agents_report``:
    status True), and a line for each one left out, saying why: a node whose gaps are all its
    NVIDIA driver's is left out with them, since the repair changes no driver.

        flagged_by_agents([("gpu-a", {"node_name": "gpu-a"}), ("gpu-b", {})], report)
        -> ([("gpu-a", {"node_name": "gpu-a"})], ["gpu-b: its agent says False (NoGap)"])
    """
    kept, left = [], []
    for name, data in hosts:
        node = data.get("node_name") or name  # inventory_names names every cluster-reached host's node
        verdict = report["nodes"].get(node)
        if verdict is None:
            left.append(f"{name}: no GPU Node named {node} carries the agent's condition (its node_name?)")
        elif verdict["agent"] != "ok":
            left.append(f"{name}: its agent is {verdict['agent']}, so nothing is said of it")
        elif (
            verdict["status"] == "True" and verdict["gaps"] and all(g["kind"] in DRIVER_KINDS for g in verdict["gaps"])
        ):
            said = "; ".join(f"[{g['kind']}] {g['detail']}" for g in verdict["gaps"])
            left.append(f"{name}: its agent's gaps are the NVIDIA driver's, which the repair does not change: {said}")
        elif verdict["status"] == "True":
            kept.append((name, data))
        else:
            left.append(f"{name}: its agent says {verdict['status']} ({verdict['reason']})")
    return kept, left
