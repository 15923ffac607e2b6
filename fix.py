"""
Repair a lab host (``pyinfra inventory.py fix.py``) or real GPU nodes (``pyinfra nodes.py fix.py``:
one node at a time, from the audit's own judgment of each, drained, fixed, restarted, proven and
put back; ``--dry`` prints the plan).

From the incident (or any drift of it) to a healthy GPU node: a drop-in this containerd's merge
keeps whole, one controlled restart only when the restart forecast says its CRI loads, the GPU
Pod running with its RuntimeClass, the toolkit upgrade rolled out with a memory request every
node can take. Every step decides from live facts; the audit at the end proves it. Rerun freely:
a repaired lab changes nothing. ``deploy.py`` brings the incident back.
"""

from pyinfra import host

from runbook.audit.lab_steps import audit_lab
from runbook.repair import lab_steps as repair
from runbook.replay import lab_host
from runbook.replay.incident import merge_report
from runbook.run import overhead, target
from runbook.run.preflight import preflight

overhead.install()  # pyinfra's planning and exit, made cheaper (runbook/run/overhead.py)
if target.in_fleet(host):  # a real GPU node (nodes.py)
    from runbook.repair.node_steps import repair_node

    repair_node(target.node_checked(host), reporter=host.data.get("gpuop_target") == "fleet")
else:  # a lab host
    lab, at = lab_host.checked(host)  # every knob parsed and checked: a bad one stops the run here
    preflight(lab)  # one run per lab at a time; kubectl reaches the cluster and its nodes
    repair.preflight(lab)  # the lab's own containerd to restart; a toolkit request every node can take
    repair.runtime(lab, at)  # 1. a drop-in that survives the merge; restart once, if the forecast is ok
    repair.gpu_pod(lab, at)  # 2. RuntimeClass nvidia's handler is loaded; the GPU Pod runs
    repair.toolkit(lab, at)  # 3. the toolkit upgrade rolls out 3/3, asking memory the nodes have
    merge_report(lab, at)  # the runtime reports, read again from the repaired node
    audit_lab(lab, at)  # written is loaded is scheduled: the audit comes back clean
