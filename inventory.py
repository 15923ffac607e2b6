"""
Lab hosts. With nothing configured the playbook targets this machine (``@local``).

To target lab VMs over SSH, list them in a hosts file (see hosts.example.yaml) and point
``GPUOP_HOSTS`` at it, or name it ``hosts.yaml`` beside this file.
"""

import os

from gpuop.hosts import load_hosts

_source = os.environ.get("GPUOP_HOSTS") or ("hosts.yaml" if os.path.exists("hosts.yaml") else "")

if _source:
    with open(_source) as _f:
        lab_hosts = load_hosts(_f.read(), _source)
else:
    lab_hosts = ["@local"]
