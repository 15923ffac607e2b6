"""
Audit, read-only: a lab host (``pyinfra inventory.py audit.py``) or real nodes
(``pyinfra nodes.py audit.py``).

Written is not loaded, loaded is not scheduled: the audit names every place where they differ,
in a table at the end of the run and in JSON (a lab host's <root>/out/audit.json; the fleet's at
``--data report=PATH`` on this machine). Any gap makes the run fail, so it can gate a cron job,
CI or a maintenance window. Safe on any host, any time: it changes nothing.
"""

from pyinfra import host

import steps
import target
from operations import ordering

ordering.install()  # pyinfra's own operation order, read faster (operations/ordering.py)
if target.is_node(host):
    steps.node_audit(target.node_checked(host))
else:
    lab, at = target.checked(host)
    steps.reachable(lab)  # read-only: no run lock, but the cluster must answer
    steps.audit(lab, at)
