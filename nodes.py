"""
Real GPU nodes, for the read-only audit: ``pyinfra nodes.py audit.py -y``.

The nodes are listed in ``nodes.yaml`` beside this file, or in the file ``GPUOP_NODES`` names,
with the lab hosts file's conventions (see nodes.example.yaml): SSH keys only, host keys always
verified, sudo for a login that is not root. Each may set ``node_name`` (default: its hostname).
A file that cannot be used is one sentence, never a traceback.
"""

import os

from pyinfra.api.exceptions import InventoryError

from gpuop.hosts import HostsFileError, read_hosts
from gpuop.knobs import NODE_PARSERS

_source = os.environ.get("GPUOP_NODES") or "nodes.yaml"
try:
    # gpuop_target tells audit.py these are real nodes, not lab hosts.
    gpu_nodes = [(name, {**data, "gpuop_target": "node"})
                 for name, data in read_hosts(_source, "the node", NODE_PARSERS, "the nodes to audit",
                                              "nodes.example.yaml", "GPUOP_NODES")]
except HostsFileError as _e:
    raise InventoryError(str(_e)) from None
