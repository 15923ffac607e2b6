"""
Real GPU nodes, for the read-only audit: ``pyinfra nodes.py audit.py -y``.

The nodes are listed in ``nodes.yaml`` beside this file, or in the file ``GPUOP_NODES`` names,
with the lab hosts file's conventions (see nodes.example.yaml): SSH keys only, host keys always
verified, sudo for a login that is not root. Each may set ``node_name`` (default: its hostname).
A nodes file without ``hosts`` (or no ``nodes.yaml`` at all) audits the cluster's GPU nodes: each
Node that advertises nvidia.com/gpu or has a GPU Pod bound, reached at its InternalIP, with the
file's ``defaults`` and its own ``overrides`` entry; the cluster is the one ``kube_context`` and
``kubeconfig`` name (``--data``, else the file's defaults, else the current context; its
deadline ``cluster_read_timeout_s``), and that
read is the run's one read of it. A node with ``reach: cluster`` (or all, ``--data
reach=cluster``) is read through the cluster instead of SSH: it is ``@kubenode/NODE``
(connectors/kubenode.py), and needs no address. A file or a cluster that cannot be used is one
sentence, never a traceback.
"""

import os
import runpy
import sys

from pyinfra.api.exceptions import DeployError, InventoryError

from gpuop.hosts import HostsFileError, cli_data, cluster_hosts, inventory_names, load_nodes, read_text
from gpuop.knobs import NODE_PARSERS, KnobError

_source = os.environ.get("GPUOP_NODES") or "nodes.yaml"
try:
    # how the nodes are reached decides their names here, so --data reach is read before pyinfra hands it over
    _given = {k: NODE_PARSERS[k](k, v) for k, v in cli_data(sys.argv, ("reach",)).items()}
    if os.environ.get("GPUOP_NODES") or os.path.exists(_source):
        _nodes = load_nodes(read_text(_source, "the nodes to audit", "nodes.example.yaml", "GPUOP_NODES"),
                            _source, NODE_PARSERS, _given)
    else:
        _nodes = load_nodes("", "(no nodes file)", NODE_PARSERS, _given)
    _hosts = _nodes.hosts
    if _hosts is None:  # only the fleet's listing loads the kubernetes client
        from operations.fleet import cluster_for_inventory

        # what the hosts get, before pyinfra hands it to them: group_data's defaults, the file's, --data
        _keys = ("kubeconfig", "kube_context", "cluster_read_timeout_s")
        _group = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "group_data", "all.py"))
        _asked = {**{k: _group[k] for k in _keys}, **_nodes.defaults, **cli_data(sys.argv, _keys)}
        _cluster = {k: NODE_PARSERS[k](k, _asked.get(k)) for k in _keys}
        _objects, _where = cluster_for_inventory(*(_cluster[k] for k in _keys))
        _hosts = cluster_hosts(_objects, _nodes, NODE_PARSERS, _where)
    # gpuop_target tells audit.py these are real nodes, not lab hosts; the fleet's reporter runs
    # here, beside them, so that the fleet is reported even when no node answers (with the
    # file's settings for all: its cluster, its report).
    gpu_nodes = [(name, {**data, "gpuop_target": "node"}) for name, data in inventory_names(_hosts, _source)]
    gpu_nodes.append(("@local", {**_nodes.settings(NODE_PARSERS), "gpuop_target": "fleet"}))
except (HostsFileError, KnobError) as _e:
    raise InventoryError(f"{_source}: {_e}" if isinstance(_e, KnobError) else str(_e)) from None
except DeployError as _e:
    raise InventoryError(f"{_e}; with no hosts in a nodes file, the GPU nodes are listed from the cluster "
                         "(or list them: see nodes.example.yaml, GPUOP_NODES)") from None
