"""The audit of a lab host, a named deploy: written against loaded against scheduled.

audit_lab(lab, at)   # audit.py on a lab host; fix.py at its end
"""

from pyinfra.api import deploy

from gpuop.layout import Layout
from runbook.audit import lab_audit as audits
from runbook.replay.lab_host import lab_daemon
from runbook.replay.manifests import OPERATOR_NAMESPACE, TIME_SLICING


@deploy("Audit: written against loaded against scheduled")
def audit_lab(lab, at: Layout):
    audits.audit_report(
        name="Findings",
        path=at.report("audit.json"),
        config=at.config_toml,
        observed=lab.loaded_runtimes_observed,
        daemon=lab_daemon(lab, at),
        context=lab.kube_context,
        kubelet_node=lab.kubelet_node,
        textfile=lab.textfile,
        time_slicing={
            "node": lab.timeslice_node,
            "physical_gpus": lab.physical_gpus,
            "vram_per_gpu_gib": lab.vram_per_gpu_gib,
            "configmap": f"{OPERATOR_NAMESPACE}/{TIME_SLICING}",
        },
    )
