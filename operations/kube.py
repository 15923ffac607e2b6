"""Kubernetes objects converged through the target's kubectl: apply, patch or wait only on a difference."""

import json

import yaml
from pyinfra import host
from pyinfra.api import StringCommand, operation

from facts.kube import KubeObjects, kubectl
from gpuop.cluster import GPU, advertised, describe_rollout, rollout_complete, rollout_settled
from gpuop.objects import differences
from gpuop.scheduling import pod_scheduled

from .files import text
from .poll import awaited, failure, until


def live(resource, namespace=None, context=""):
    """The live object (``"kind/name"``), or None."""
    found = host.get_fact(KubeObjects, resources=resource, namespace=namespace, context=context)
    return found[0] if found else None


def of_kind(objects: list, kind: str, name: str | None = None) -> list:
    """The objects of one kind (and name) among a mixed ``kubectl get`` result."""
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


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
    def probe():
        found = host.get_fact(KubeObjects, namespace=namespace_name, context=context,
                              resources=(f"namespace/{namespace_name}", "serviceaccount/default"))
        return of_kind(found, "Namespace"), of_kind(found, "ServiceAccount")

    ns, account = probe()
    if ns and ns[0]["metadata"].get("deletionTimestamp"):
        yield until(
            f"namespace {namespace_name} to finish terminating",
            probe,
            lambda seen: (not seen[0], "terminating" if seen[0] else "gone"),
            timeout_s,
        )
        ns = account = []
    if not ns:
        yield kubectl(context, "create", "namespace", namespace_name)
    if not account:
        yield until(
            f"ServiceAccount {namespace_name}/default",
            probe,
            lambda seen: (bool(seen[1]), "present" if seen[1] else "absent"),
            timeout_s,
        )


@operation()
def manifest(path: str, content: str, context: str = ""):
    """
    Ensure a manifest file holds ``content`` and its objects are live as it says. The file is
    applied only when a field it sets differs on the cluster; a Pod that differs is replaced
    (its spec is immutable).

    + path: the manifest file on the target
    + content: its YAML text
    + context: kubeconfig context, empty for the current one

    .. code:: python

        manifest(path="/root/gpuop/k8s/gpu-pod.yaml", content=pod_yaml)
    """
    yield from text._inner(path=path, content=content, backup=False)
    replace = stale = False
    for obj in yaml.safe_load_all(content):
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
        yield failure(f"node {node} not found in the cluster")
        return
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
    yield from awaited(f"the scheduler's decision on Pod {namespace}/{pod}",
                       lambda: live(f"pod/{pod}", namespace, context),
                       lambda seen: (bool(seen and pod_scheduled(seen)), _pod_state(seen)), timeout_s)


@operation()
def pod_running(pod: str, namespace: str, context: str = "", timeout_s: int = 120):
    """
    Wait until a Pod is bound and Running.

    .. code:: python

        pod_running(pod="cuda-probe", namespace="gpu-lab")
    """
    yield from awaited(f"Pod {namespace}/{pod} Running", lambda: live(f"pod/{pod}", namespace, context),
                       lambda seen: (bool(seen and seen["status"].get("phase") == "Running"),
                                     _pod_state(seen)), timeout_s)


def deleted(resources: str, namespace=None, context: str = "") -> StringCommand:
    """The command deleting objects (``"kind/name kind/name"``) and waiting until they are gone."""
    ns = ("--namespace", namespace) if namespace else ()
    return StringCommand(kubectl(context, "delete", *resources.split(), *ns, "--ignore-not-found",
                                 "--wait=true"))


def daemonset_and_pods(name, namespace, context=""):
    """The live DaemonSet (or None) and the Pods of its namespace, in one read."""
    found = host.get_fact(KubeObjects, resources="daemonsets,pods", namespace=namespace,
                          context=context)
    ds = of_kind(found, "DaemonSet", name)
    return (ds[0] if ds else None), of_kind(found, "Pod")


@operation()
def daemonset_ready(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until every node runs a Ready Pod of the DaemonSet's current spec.

    .. code:: python

        daemonset_ready(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    yield from awaited(f"all Pods of DaemonSet {namespace}/{daemonset} Ready",
                       lambda: daemonset_and_pods(daemonset, namespace, context),
                       lambda seen: (bool(seen[0]) and rollout_complete(seen[0]), describe_rollout(*seen)),
                       timeout_s)


@operation()
def daemonset_settled(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until a DaemonSet rollout has gone as far as it can: complete, or stalled on an updated
    Pod that no node can take.

    .. code:: python

        daemonset_settled(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    yield from awaited(f"the rollout of DaemonSet {namespace}/{daemonset} to complete or stall",
                       lambda: daemonset_and_pods(daemonset, namespace, context),
                       lambda seen: (bool(seen[0]) and rollout_settled(*seen), describe_rollout(*seen)),
                       timeout_s)
