"""What a lab run checks before it changes anything, each a named deploy.

preflight(lab)   # deploy.py and fix.py: the run lock, the cluster, the lab containerd
reachable(lab)   # audit.py: read-only, no lock, but the cluster must answer
"""

from pyinfra import host
from pyinfra.api import deploy

from gpuop.layout import Layout
from runbook.run import checks
from runbook.run.runlock import hold_during_run


@deploy("Preflight")
def preflight(lab):
    hold_during_run(host, context=lab.kube_context, timeout_s=lab.wait_timeout_s)
    reachable(lab)
    if lab.kubelet_node:
        checks.kubelet_node_held(
            name="the kubelet node's namespace is there (lab/kubeletnode.sh up)",
            node=lab.kubelet_node,
            namespace=Layout(lab.gpuop_root).kubelet_node_namespace,
        )
    checks.containerd_askable(
        name="the lab containerd can be asked through CRI", binary=lab.containerd_binary, crictl=lab.crictl_binary
    )


@deploy("Preflight: the lab cluster answers")
def reachable(lab):
    # The kubelet node registers only once the lab containerd (step 2) answers: step 5 waits for it.
    kwok_nodes = tuple(n for n in lab.lab_nodes if n != lab.kubelet_node)
    checks.lab_reachable(
        name="kubectl reaches the lab cluster and its nodes", nodes=kwok_nodes, context=lab.kube_context
    )
