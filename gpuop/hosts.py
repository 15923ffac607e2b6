"""Lab hosts from a small YAML file a user edits without touching Python.

    defaults:                 # optional, for every host
      ssh_user: root
      ssh_key: ~/.ssh/gpuop_ed25519
    hosts:
      lab-a:
        ssh_hostname: 192.0.2.10
        ssh_port: 22
        gpuop_root: /root/gpuop       # any knob of group_data/all.py, per host
        kube_context: kwok-gpuop-lab
"""

import os
from dataclasses import dataclass

import yaml

from .cluster import allocatable_count, gpus_asked
from .knobs import PARSERS, REACHES

# _sudo: a login that is not root gets sudo, unless it is a uid-0 account that says false.
SSH_KEYS = {"ssh_hostname", "ssh_port", "ssh_user", "ssh_key", "ssh_known_hosts_file",
            "ssh_strict_host_key_checking", "_sudo"}
# Secrets never live in a project file: keys and an agent, not passwords.
SECRET_KEYS = {"ssh_password", "ssh_key_password", "sudo_password", "_sudo_password",
               "_su_password", "password"}
# Host keys are verified; "accept-new" (pyinfra's default) or "no" would trust a stranger.
STRICT = "yes"


class HostsFileError(ValueError):
    """The hosts file is unusable: which file, which host, which key, what was expected."""


def _expand(path):
    return os.path.expanduser(str(path))


def host_data(name: str, spec: dict, source: str, what: str = "the lab VM", knobs=PARSERS) -> dict:
    """One host's pyinfra data: SSH settings with safe defaults, plus its knobs (the keys of
    ``knobs``: a lab host's, or a real node's ``NODE_PARSERS``).

        host_data("lab-a", {"ssh_hostname": "10.0.0.5", "ssh_user": "ubuntu"}, "hosts.yaml")
        -> {"ssh_hostname": "10.0.0.5", "ssh_user": "ubuntu", "_sudo": True,
            "ssh_strict_host_key_checking": "yes", "ssh_known_hosts_file": "/home/me/.ssh/known_hosts"}
    """
    where = f"{source}: host {name}"
    for key, value in spec.items():
        if key in SECRET_KEYS:
            raise HostsFileError(f"{where}: key {key} is refused: no password or secret in a "
                                 "file; use an SSH key (ssh_key) and passwordless sudo")
        if key not in SSH_KEYS and key not in knobs:
            raise HostsFileError(f"{where}: unknown key {key}; expected one of "
                                 f"{', '.join(sorted(SSH_KEYS | set(knobs)))}")
    if "ssh_hostname" not in spec and spec.get("reach") != "cluster":
        raise HostsFileError(f"{where}: ssh_hostname missing; expected the address of {what}")
    if spec.get("ssh_strict_host_key_checking", STRICT) != STRICT:
        raise HostsFileError(f"{where}: ssh_strict_host_key_checking="
                             f"{spec['ssh_strict_host_key_checking']!r} refused; host keys are "
                             "always verified (add the host to known_hosts)")
    data = {"ssh_strict_host_key_checking": STRICT,
            "ssh_known_hosts_file": _expand("~/.ssh/known_hosts")}
    for key, value in spec.items():
        data[key] = _expand(value) if key in ("ssh_key", "ssh_known_hosts_file") else value
    if data.get("ssh_user", "root") != "root":
        data.setdefault("_sudo", True)  # the lab's paths are under /root (a uid-0 login sets false)
    return data


def _document(text: str, source: str, keys: tuple) -> dict:
    """The file's YAML mapping, its top-level keys among ``keys``."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise HostsFileError(f"{source}: not valid YAML{where}: {problem}") from None
    if not isinstance(doc, dict):
        raise HostsFileError(f"{source}: expected a mapping of {', '.join(keys)}")
    unknown = set(doc) - set(keys)
    if unknown:
        raise HostsFileError(f"{source}: unknown top-level keys {sorted(unknown)}; expected {', '.join(keys)}")
    for key in ("defaults", "overrides"):
        if not isinstance(doc.get(key) or {}, dict):
            raise HostsFileError(f"{source}: {key} must be a mapping")
    return doc


def load_hosts(text: str, source: str, what: str = "the lab VM", knobs=PARSERS) -> list:
    """The inventory's hosts, ``[(name, data), ...]``, from the hosts file's text: a lab's hosts
    file, or the nodes file of real nodes (``what`` names them in errors; ``knobs``, the keys a
    host may set: ``NODE_PARSERS`` for real nodes).

        load_hosts(open("hosts.yaml").read(), "hosts.yaml") -> [("lab-a", {...}), ...]
    """
    doc = _document(text, source, ("defaults", "hosts"))
    if not isinstance(doc.get("hosts"), dict) or not doc["hosts"]:
        raise HostsFileError(f"{source}: expected a mapping with a non-empty 'hosts' mapping")
    defaults = doc.get("defaults") or {}
    return [(name, host_data(name, {**defaults, **(spec or {})}, source, what, knobs))
            for name, spec in doc["hosts"].items()]


def read_text(path: str, listing: str, example: str, env: str) -> str:
    """The hosts file's text; one that is missing or cannot be read is a ``HostsFileError``
    saying which file and what to do (``listing``, ``example`` and ``env`` name the way out)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise HostsFileError(f"{path}: no such file; list {listing} in one (see {example}), or "
                             f"point {env} at one") from None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise HostsFileError(f"{path}: cannot be read ({why}); {env} names the hosts file") from None


def read_hosts(path: str, what: str = "the lab VM", knobs=PARSERS, listing: str = "the lab hosts",
               example: str = "hosts.example.yaml", env: str = "GPUOP_HOSTS") -> list:
    """``load_hosts`` of the file at ``path`` (see ``read_text``).

        read_hosts("/nonexistent") -> HostsFileError("/nonexistent: no such file; list the lab hosts ...")
    """
    return load_hosts(read_text(path, listing, example, env), path, what, knobs)


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
    doc = _document(text, source, ("defaults", "hosts", "overrides", "node_selector"))
    defaults = doc.get("defaults") or {}
    if not isinstance(doc.get("hosts") or {}, dict):
        raise HostsFileError(f"{source}: hosts must be a mapping of each host's name to its keys")
    if doc.get("hosts"):
        if doc.get("overrides") or doc.get("node_selector"):
            raise HostsFileError(f"{source}: overrides and node_selector apply to the nodes the cluster lists; "
                                 "with hosts listed, set each host's own keys")
        hosts = [(name, host_data(name, {**defaults, **(spec or {}), **(given or {})}, source, "the node", knobs))
                 for name, spec in doc["hosts"].items()]
        return NodesFile(source, defaults, hosts, {}, "", given or {})
    overrides = doc.get("overrides") or {}
    for name, spec in overrides.items():
        if not isinstance(spec, dict):
            raise HostsFileError(f"{source}: overrides: {name} must be a mapping of that node's own keys")
    return NodesFile(source, defaults, None, overrides, str(doc.get("node_selector") or ""), given or {})


def selects(labels: dict, selector: str) -> bool:
    """Whether labels match a selector of comma-separated ``key=value``, ``key!=value`` and
    ``key`` (present) terms, as kubectl's ``-l`` takes them; an empty one matches all.

        selects({"pool": "gpu"}, "pool=gpu,!spot") -> True
    """
    for term in filter(None, (t.strip() for t in selector.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                key, value = (part.strip() for part in term.split(op, 1))
                if (labels.get(key) == value) != (op != "!="):
                    return False
                break
        else:
            if (term.lstrip("!") in labels) == term.startswith("!"):
                return False
    return True


def gpu_nodes(objects: list, selector: str = "") -> list:
    """The cluster's GPU nodes, ``[(node name, address), ...]``: each Node that advertises
    nvidia.com/gpu or has a Pod bound that asks for GPUs, its labels matching ``selector``;
    its address the InternalIP, else its first address, else its name.

        gpu_nodes(objects, "pool=gpu") -> [("ip-10-0-0-7", "10.0.0.7")]
    """
    bound = {p["spec"].get("nodeName") for p in objects if p["kind"] == "Pod" and gpus_asked(p)}
    found = []
    for node in (o for o in objects if o["kind"] == "Node"):
        name = node["metadata"]["name"]
        if not (allocatable_count(node) or name in bound) or not selects(node["metadata"].get("labels") or {}, selector):
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
    found = gpu_nodes(objects, nodes.node_selector)
    if not found:
        chosen = f" whose labels match {nodes.node_selector}" if nodes.node_selector else ""
        raise HostsFileError(f"the cluster ({where}) has no GPU node{chosen} (a Node that advertises "
                             "nvidia.com/gpu or has a GPU Pod bound): nothing to audit")
    names = {name for name, _ in found}
    stray = sorted(set(nodes.overrides) - names)
    if stray:
        raise HostsFileError(f"{nodes.source}: overrides name {', '.join(stray)}, not a GPU node the cluster lists "
                             f"({', '.join(sorted(names))})")
    return [(name, host_data(name, {"ssh_hostname": address, **nodes.defaults, "node_name": name,
                                    **(nodes.overrides.get(name) or {}), **nodes.given}, nodes.source, "the node", knobs))
            for name, address in found]


def inventory_names(hosts: list, source: str) -> list:
    """The hosts as pyinfra's inventory names them: a node read over SSH by its own name, one
    read through the cluster (``reach: cluster``) as ``@kubenode/NODE`` (connectors.kubenode),
    NODE its ``node_name``, else the host's name. Two hosts on one node that way are refused.

        inventory_names([("gpu-a", {"reach": "cluster", "node_name": "ip-10-0-0-7"})], "nodes.yaml")
        -> [("@kubenode/ip-10-0-0-7", {"reach": "cluster", "node_name": "ip-10-0-0-7"})]
    """
    named, seen = [], {}
    for name, data in hosts:
        if data.get("reach", "ssh") not in REACHES:
            raise HostsFileError(f"{source}: host {name}: reach={data['reach']!r}: expected one of {', '.join(REACHES)} "
                                 "(its SSH login, or a short-lived Pod on it through the cluster)")
        if data.get("reach") == "cluster":
            node = data.get("node_name") or name
            if node in seen:
                raise HostsFileError(f"{source}: hosts {seen[node]} and {name} both read node {node} "
                                     "through the cluster: one host per node")
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
