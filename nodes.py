"""
Real GPU nodes, for the read-only audit: ``pyinfra nodes.py audit.py -y``.

The nodes are listed in ``nodes.yaml`` beside this file, or in the file ``GPUOP_NODES`` names,
with the lab hosts file's conventions (see nodes.example.yaml): SSH keys only, host keys always
verified, sudo for a login that is not root. Each may set ``node_name`` (default: its hostname).
"""

import os

from gpuop.hosts import HostsFileError, load_hosts
from gpuop.knobs import NODE_PARSERS

_source = os.environ.get("GPUOP_NODES") or "nodes.yaml"
if not os.path.exists(_source):
    raise HostsFileError(f"{_source}: no nodes file; list the nodes to audit (see nodes.example.yaml), "
                         "or point GPUOP_NODES at one")
with open(_source) as _f:
    # gpuop_target tells audit.py these are real nodes, not lab hosts.
    gpu_nodes = [(name, {**data, "gpuop_target": "node"})
                 for name, data in load_hosts(_f.read(), _source, "the node", NODE_PARSERS)]
