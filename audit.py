"""
Audit, read-only: a lab host (``pyinfra inventory.py audit.py``) or real nodes
(``pyinfra nodes.py audit.py``).

Written is not loaded, loaded is not scheduled: the audit names every place where they differ,
in a table at the end of the run and in JSON (a lab host's <root>/out/audit.json; the fleet's at
``--data report=PATH`` on this machine). Any gap makes the run fail, so it can gate a cron job,
CI or a maintenance window. Safe on any host, any time: it changes nothing.
"""

from pyinfra import host

from runbook.replay import lab_host
from runbook.run import overhead, target

overhead.install()  # pyinfra's planning and exit, made cheaper (runbook/run/overhead.py)
if target.in_fleet(host):  # a real GPU node (nodes.py): only this audit loads the kubernetes client
    from runbook.audit.node_steps import audit_node

    audit_node(target.node_checked(host), reporter=host.data.get("gpuop_target") == "fleet")
else:  # a lab host
    from runbook.audit.lab_steps import audit_lab
    from runbook.run.preflight import reachable

    lab, at = lab_host.checked(host)
    reachable(lab)  # read-only: no run lock, but the cluster must answer
    audit_lab(lab, at)
