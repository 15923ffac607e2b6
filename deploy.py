"""
The GPU runtime incident, replayed on a lab host: ``pyinfra inventory.py deploy.py``.

Written is not loaded, loaded is not scheduled: each step builds one piece of the incident and
its report reads what is live. Rerun freely; a converged lab changes nothing.
"""

from pyinfra import host
from pyinfra.api.exceptions import DeployError

import steps
from operations import preflight
from gpuop.knobs import KnobError, parse_knobs
from gpuop.layout import Layout

try:
    lab = parse_knobs(host.data)
except KnobError as bad:
    raise DeployError(f"{host.name}: {bad} (nothing was changed)") from None
at = Layout(lab.gpuop_root)

preflight.lab_reachable(name="Preflight: kubectl reaches the lab cluster and its nodes",
                        nodes=lab.lab_nodes, context=lab.kube_context)
steps.main_config(lab, at)  # 1. the node's containerd config.toml
steps.nvidia_dropin(lab, at)  # 2. the drop-in the NVIDIA toolkit wrote
steps.merge_report(lab, at)  # 3. what the files define against what containerd loaded
steps.check_script(lab, at)  # 4. the 3-second check: ask containerd, not the disk
steps.runtime_class_and_pod(lab, at)  # 5. RuntimeClass nvidia, and a GPU Pod left Pending
steps.advertise_gpus(lab, at)  # 6. the device plugin's advertisement binds the Pod
steps.time_slicing(lab, at)  # 7. five slots per GPU, and no memory guaranteed to any
steps.toolkit_rollout(lab, at)  # 8. a toolkit upgrade asking 64Gi stalls half-way
