"""
Audit a lab host, read-only: ``pyinfra inventory.py audit.py``.

Written is not loaded, loaded is not scheduled: the audit names every place where they differ,
in a table at the end of the run and in <root>/out/audit.json. Any gap makes the run fail, so
it can gate a cron job or CI. Safe on any host, any time: it changes nothing in the lab.
"""

from pyinfra import host

import steps
import target
from operations import ordering

ordering.install()  # pyinfra's own operation order, read faster (operations/ordering.py)
lab, at = target.checked(host)
steps.reachable(lab)  # read-only: no run lock, but the cluster must answer
steps.audit(lab, at)
