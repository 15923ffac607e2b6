"""
Lab hosts. With nothing configured the playbook targets this machine (``@local``).

To target lab VMs over SSH, list them in a hosts file (see hosts.example.yaml) and point
``GPUOP_HOSTS`` at it, or name it ``hosts.yaml`` beside this file. A file that cannot be used
is one sentence (which file, which host, which key, what to do), never a traceback.
"""

import os

from pyinfra.api.exceptions import InventoryError

from gpuop.reach.hosts import HostsFileError, read_hosts

_source = os.environ.get("GPUOP_HOSTS") or ("hosts.yaml" if os.path.exists("hosts.yaml") else "")
try:
    lab_hosts = read_hosts(_source) if _source else ["@local"]
except HostsFileError as _e:
    raise InventoryError(str(_e)) from None
