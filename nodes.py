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
(runbook/reach/kubenode.py), and needs no address. A file or a cluster that cannot be used is one
sentence, never a traceback.
"""

import os
import sys

from pyinfra.api.exceptions import InventoryError

from runbook.reach.fleet_inventory import NodesUnusable, fleet_hosts

try:
    gpu_nodes = fleet_hosts(sys.argv, os.environ)
except NodesUnusable as e:
    raise InventoryError(str(e)) from None  # pyinfra says it in one line, naming this file
