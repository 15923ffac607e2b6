"""Kubernetes objects converged through the target's kubectl: apply, patch or wait only on a difference."""

import json

import yaml
from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from facts.kube import KubeObjects, kubectl
from gpuop.cluster import advertised, describe_rollout, rollout_complete, rollout_settled
from gpuop.objects import differences
from gpuop.scheduling import pod_scheduled

from .poll import until

GPU = "nvidia.com/gpu"


def live(resource, namespace=None, context=""):
    """The live object (``"kind/name"``), or None."""
    found = host.get_fact(KubeObjects, resource=resource, namespace=namespace, context=context)
    return found[0] if found else None


def ref(obj: dict) -> str:
    """``kind/name`` of a manifest object, as kubectl takes it."""
    return f"{obj['kind'].lower()}/{obj['metadata']['name']}"


@operation()
def namespace(namespace_name: str, context: str = "", timeout_s: int = 120):
    """
    Ensure a namespace exists and can take Pods (its ``default`` ServiceAccount is there).
    A namespace still terminating is waited out first.

    + namespace_name: the namespace
    + context: kubeconfig context, empty for the current one
    + timeout_s: how long to wait for termination or the ServiceAccount

    .. code:: python

        namespace(namespace_name="gpu-lab")
    """
    ns = live(f"namespace/{namespace_name}", context=context)
    if ns and ns["metadata"].get("deletionTimestamp"):
        yield until(
            f"namespace {namespace_name} to finish terminating",
            lambda: live(f"namespace/{namespace_name}", context=context),
            lambda seen: (seen is None, "gone" if seen is None else "terminating"),
            timeout_s,
        )
        ns = None
    if ns is None:
        yield kubectl(context, "create", "namespace", namespace_name)
    if live("serviceaccount/default", namespace_name, context) is None:
        yield until(
            f"ServiceAccount {namespace_name}/default",
            lambda: live("serviceaccount/default", namespace_name, context),
            lambda seen: (seen is not None, "present" if seen else "absent"),
            timeout_s,
        )


@operation()
def applied(path: str, manifest: str, context: str = ""):
    """
    Ensure the objects of a manifest file are live as it says; apply the file only when a field it
    sets differs. A Pod that differs is replaced (its spec is immutable).

    + path: the manifest file on the target (already written)
    + manifest: its text, to compare with the live objects
    + context: kubeconfig context, empty for the current one

    .. code:: python

        applied(path="/root/gpuop/k8s/gpu-pod.yaml", manifest=pod_yaml)
    """
    replace = False
    stale = False
    for obj in yaml.safe_load_all(manifest):
        have = live(ref(obj), obj["metadata"].get("namespace"), context)
        if have is None:
            stale = True
        elif differences(obj, have):
            stale = True
            replace = replace or obj["kind"] == "Pod"
    if replace:
        yield kubectl(context, "replace", "--force", "--filename", path)
    elif stale:
        yield kubectl(context, "apply", "--filename", path)


def gpu_patch(count) -> str:
    """A merge patch setting (or, for None, removing) ``nvidia.com/gpu`` in capacity and allocatable."""
    value = None if count is None else str(count)
    return json.dumps({"status": {"capacity": {GPU: value}, "allocatable": {GPU: value}}})


@operation()
def node_gpus(node: str, count, context: str = ""):
    """
    Ensure a node advertises ``count`` GPUs like a device plugin would: capacity and allocatable
    together, as strings, through the node's ``status`` subresource. ``None`` removes them.

    + node: the Node
    + count: GPUs to advertise, or None for none at all
    + context: kubeconfig context, empty for the current one

    .. code:: python

        node_gpus(node="lab-node-0", count=4)
    """
    have = live(f"node/{node}", context=context)
    if have is None:
        raise OperationError(f"node {node} not found in the cluster")
    want = None if count is None else str(count)
    if advertised(have) != {"capacity": want, "allocatable": want}:
        yield kubectl(context, "patch", "node", node, "--subresource=status", "--type=merge",
                      "--patch", gpu_patch(count))


def _pod_state(pod):
    if pod is None:
        return "absent"
    cond = pod_scheduled(pod) or {}
    where = pod["spec"].get("nodeName") or "no node"
    return f"phase {pod['status'].get('phase')}, on {where}, PodScheduled {cond.get('status', 'unset')} {cond.get('reason', '')}".rstrip()


@operation()
def pod_scheduling_decided(pod: str, namespace: str, context: str = "", timeout_s: int = 120):
    """
    Wait until the scheduler has decided about a Pod: its PodScheduled condition is set.

    + pod: the Pod's name
    + namespace: its namespace
    + context: kubeconfig context, empty for the current one
    + timeout_s: how long to wait

    .. code:: python

        pod_scheduling_decided(pod="cuda-probe", namespace="gpu-lab")
    """
    probe = lambda: live(f"pod/{pod}", namespace, context)  # noqa: E731
    if pod_scheduled(probe() or {}) is None:
        yield until(f"the scheduler's decision on Pod {namespace}/{pod}", probe,
                    lambda seen: (bool(seen and pod_scheduled(seen)), _pod_state(seen)), timeout_s)


@operation()
def pod_running(pod: str, namespace: str, context: str = "", timeout_s: int = 120):
    """
    Wait until a Pod is bound and Running.

    .. code:: python

        pod_running(pod="cuda-probe", namespace="gpu-lab")
    """
    probe = lambda: live(f"pod/{pod}", namespace, context)  # noqa: E731
    running = lambda seen: bool(seen and seen["status"].get("phase") == "Running")  # noqa: E731
    if not running(probe()):
        yield until(f"Pod {namespace}/{pod} Running", probe,
                    lambda seen: (running(seen), _pod_state(seen)), timeout_s)


def deleted(resource: str, namespace=None, context: str = "") -> StringCommand:
    """The command deleting an object and waiting until it is gone."""
    ns = ("--namespace", namespace) if namespace else ()
    return StringCommand(kubectl(context, "delete", resource, *ns, "--ignore-not-found", "--wait=true"))


def _daemonset(name, namespace, context):
    """Probe: the DaemonSet and the Pods of its namespace."""
    return (live(f"daemonset/{name}", namespace, context),
            host.get_fact(KubeObjects, resource="pods", namespace=namespace, context=context))


@operation()
def daemonset_ready(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until every node runs a Ready Pod of the DaemonSet's current spec.

    .. code:: python

        daemonset_ready(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    probe = lambda: _daemonset(daemonset, namespace, context)  # noqa: E731
    done = lambda seen: (bool(seen[0]) and rollout_complete(seen[0]), describe_rollout(*seen))  # noqa: E731
    if not done(probe())[0]:
        yield until(f"all Pods of DaemonSet {namespace}/{daemonset} Ready", probe, done, timeout_s)


@operation()
def daemonset_settled(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until a DaemonSet rollout has gone as far as it can: complete, or stalled on an updated
    Pod that no node can take.

    .. code:: python

        daemonset_settled(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    probe = lambda: _daemonset(daemonset, namespace, context)  # noqa: E731
    done = lambda seen: (bool(seen[0]) and rollout_settled(*seen), describe_rollout(*seen))  # noqa: E731
    if not done(probe())[0]:
        yield until(f"the rollout of DaemonSet {namespace}/{daemonset} to complete or stall",
                    probe, done, timeout_s)
