"""Checks before the first change: is this host able to run the incident at all?"""

from datetime import UTC, datetime

from pyinfra.api import operation

from gpuop.judgment.cluster import nodes_too_small
from gpuop.judgment.leases import stalled_components
from runbook.reach.kube import ClusterUnanswered
from runbook.run import reads
from runbook.run.poll import failure
from runbook.run.reads import found


@operation()
def lab_reachable(nodes, context: str = ""):
    """
    Fail the host, before anything is changed, unless kubectl is there, reaches the cluster, the
    cluster has every lab node, and every component the incident needs still works: the
    scheduler, the controller-manager and each node's agent renew their leases (a run would
    otherwise wait out its timeout on a symptom, a Pod never scheduled or a namespace never gone).

    + nodes: the lab nodes the incident needs
    + context: kubeconfig context, empty for the current one

    .. code:: python

        lab_reachable(nodes=("lab-node-0", "lab-node-1", "lab-node-2"))
    """
    where = f"context {context}" if context else "the current kubeconfig context"
    answer = reads.cluster_answer()  # the declared scope's context: this one
    if isinstance(answer, ClusterUnanswered):
        missing = "kubectl: not found" in str(answer) or "failed to run command 'kubectl'" in str(answer)
        why = "kubectl not found on PATH" if missing else answer
        yield failure(f"preflight: the cluster of {where} is unreachable: {why}; nothing was changed")
        return
    have = [o["metadata"]["name"] for o in answer if o["kind"] == "Node"]
    missing = [n for n in nodes if n not in have]
    if missing:
        yield failure(
            f"preflight: lab nodes {', '.join(missing)} not in the cluster of {where} "
            f"(it has: {', '.join(have) or 'none'}); nothing was changed"
        )
        return
    stalled = stalled_components(answer, nodes, datetime.now(UTC))
    if stalled:
        yield failure(
            f"preflight: the cluster of {where} answers, but a component is down: "
            f"{'; '.join(stalled)}. `make lab-up` on the lab host starts what stopped; "
            "nothing was changed"
        )


@operation()
def containerd_askable(binary: str, crictl: str):
    """
    Fail the host, before anything is changed, when it has the lab's containerd but no crictl to
    ask it through CRI (without one, "loaded" could only be guessed). A host without that
    containerd passes: it runs the lab on the recorded observation.

    + binary: the lab containerd, empty for none
    + crictl: the crictl command

    .. code:: python

        containerd_askable(binary="/usr/bin/containerd", crictl="crictl")
    """
    views = reads.containerd() if binary else None
    if views and views["restart"] is not None and not views["loaded"]["crictl"]:
        yield failure(
            f"preflight: {crictl} not found, and it is what asks the lab containerd "
            f"({binary}) what it holds; install cri-tools, or set containerd_binary= to "
            "run on the recorded observation; nothing was changed"
        )


@operation()
def kubelet_node_held(node: str, namespace: str):
    """
    Fail the host, before anything is changed, unless the lab's kubelet node's mount namespace is
    there: the lab containerd starts in it (lab/kubeletnode.sh up makes it, with the node's kubelet).

    .. code:: python

        kubelet_node_held(node="lab-node-0", namespace="/root/gpuop/var/node/mnt")
    """
    if not reads.containerd()["loaded"]["namespace"]:
        yield failure(
            f"preflight: kubelet_node={node}, but its namespace {namespace} is not there; "
            "`make lab-up NODE=kubelet` (lab/kubeletnode.sh up) makes it and starts its kubelet; "
            "nothing was changed"
        )


@operation()
def lab_containerd_present(binary: str):
    """
    Fail the host, before anything is changed, unless it runs the lab's own containerd: the
    repair restarts that daemon, and never another one.

    .. code:: python

        lab_containerd_present(binary="/usr/bin/containerd")
    """
    if not binary or reads.containerd()["restart"] is None:
        yield failure(
            f"preflight: the repair restarts the lab's own containerd, and this host has "
            f"none (containerd_binary={binary!r}); nothing was changed"
        )


@operation()
def memory_fits(knob: str, memory: str, nodes, context: str = ""):
    """
    Fail the host, before anything is changed, when a DaemonSet Pod asking ``memory`` does not
    fit every lab node's allocatable memory (its rollout could never complete).

    + knob: the knob the request comes from, for the message
    + memory: the memory request, e.g. "256Mi"
    + nodes: the lab nodes

    .. code:: python

        memory_fits(knob="toolkit_memory_fix", memory="256Mi", nodes=lab_nodes)
    """
    small = nodes_too_small(found("nodes", context=context), nodes, memory)
    if small:
        compared = ", ".join(f"{name} {have}" for name, have in small)
        yield failure(
            f"preflight: {knob}={memory} does not fit every lab node: compared against each "
            f"node's allocatable memory, {compared} cannot take it; nothing was changed"
        )
