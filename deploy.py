"""
The GPU runtime incident, replayed on a lab host: ``pyinfra inventory.py deploy.py``.

Written is not loaded, loaded is not scheduled: each step builds one piece of the incident and
its report reads what is live. Rerun freely; a converged lab changes nothing.
"""

from pyinfra import host

from runbook.replay import incident, lab_host
from runbook.run import overhead
from runbook.run.preflight import preflight

overhead.install()  # pyinfra's planning and exit, made cheaper (runbook/run/overhead.py)
lab, at = lab_host.checked(host)  # every knob parsed and checked: a bad one stops the run here
preflight(lab)  # one run per lab at a time; kubectl reaches the cluster and its nodes
if lab.replay:
    incident.reset_lab(lab, at)  # 0. back to before step 1, to replay the whole incident
incident.containerd_config(lab, at)  # 1. the node's containerd config.toml
incident.nvidia_dropin(lab, at)  # 2. the drop-in the NVIDIA toolkit wrote
incident.merge_report(lab, at)  # 3. what the files define against what containerd loaded
incident.check_script(lab, at)  # 4. the 3-second check: ask containerd, not the disk
incident.runtime_class_and_pod(lab, at)  # 5. RuntimeClass nvidia, and a GPU Pod left Pending
incident.advertise_gpus(lab, at)  # 6. the device plugin's advertisement binds the Pod
incident.time_slicing(lab, at)  # 7. five slots per GPU, and no memory guaranteed to any
incident.toolkit_rollout(lab, at)  # 8. a toolkit upgrade asking 64Gi stalls half-way
if lab.reboot:
    incident.reboot(lab, at)  # then a reboot: the kubelet node as restart.txt forecast it
incident.summary(lab, at)  # after pyinfra's results: what the incident showed, and where the reports are
