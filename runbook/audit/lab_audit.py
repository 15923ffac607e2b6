"""The audit's one operation: read everything, write audit.json, say what differs."""

import json

from pyinfra import host, logger
from pyinfra.api import operation

from gpuop.judgment.lab_audit import audit
from gpuop.outputs.tables import host_table
from runbook.replay.reports import Unobservable, containerd_views
from runbook.run.files import text
from runbook.run.poll import failure
from runbook.run.reads import found


@operation()
def audit_report(
    path: str,
    config: str,
    observed,
    daemon,
    time_slicing: dict,
    context: str = "",
    kubelet_node: str = "",
    textfile: str = "",
):
    """
    Audit a lab host, read-only: handlers written against loaded (live through CRI, or recorded)
    against what a restart of containerd would load, RuntimeClasses whose handler
    is not loaded and the Pods using them, GPUs advertised against requested per node (and the
    time-sliced node against physical x replicas), Pending Pods by reason, stalled rollouts.
    The findings go to ``path`` as JSON (rewritten only when they change) and to the log as a
    table; any gap fails the host, so the run's exit status gates a cron job or CI.

    + path: the audit report on the target
    + config: the containerd main config (config.toml) whose drop-ins are followed
    + observed: handlers recorded on the incident day, for a host without a lab containerd
    + daemon: the lab's containerd (``LabDaemon``), or None
    + time_slicing: {"node", "physical_gpus", "configmap": "namespace/name"}
    + context: kubeconfig context, empty for the current one
    + kubelet_node: the lab node a real kubelet runs (its sandbox failures are held against its events)
    + textfile: the audit in Prometheus' text format on the target (the fleet's series, its node the
      kubelet node or else this host); empty: none

    .. code:: python

        audit_report(path="/root/gpuop/out/audit.json", config=".../config.toml",
                 observed=("runc",), daemon=LabDaemon(...), time_slicing={"node": "lab-node-1", "physical_gpus": 4,
                                                   "configmap": "gpu-operator/time-slicing-config"})
    """
    try:
        views = containerd_views(config, observed, daemon)
    except Unobservable as e:
        yield failure(f"audit: {e}")
        return
    objects = found(
        "runtimeclasses,nodes,pods,daemonsets,configmaps" + (",events" if kubelet_node else ""),
        context=context,
        all_namespaces=True,
    )
    result = audit(views.view, objects, time_slicing, kubelet_node)
    yield from text._inner(path=path, content=json.dumps(result, indent=2, sort_keys=True) + "\n", backup=False)
    if textfile:  # the fleet's writer, so a lab host and a real node feed the same alerts
        from gpuop.outputs.textfile import host_report
        from gpuop.outputs.textfile import textfile as prometheus_text

        yield from text._inner(
            path=textfile, content=prometheus_text(host_report(kubelet_node or host.name, result)), backup=False
        )
    if host.state.is_executing:
        for line in host_table(result):
            logger.info(f"{host.print_prefix}{line}")
    if result["gaps"]:
        yield failure(f"audit: {len(result['gaps'])} gap(s) between written and live; see {path}")
