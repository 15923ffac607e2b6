"""Kubernetes objects converged through the target's kubectl: apply, patch or wait only on a difference."""

import json
from datetime import datetime

import yaml
from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from gpuop.judgment.cluster import (
    GPU,
    advertised,
    describe_rollout,
    node_ready,
    ready_condition,
    reported_since,
    rollout_complete,
    rollout_settled,
    sandbox_failure,
)
from gpuop.judgment.objects import differences, of_kind
from gpuop.judgment.scheduling import pod_scheduled
from gpuop.judgment.view import api_handlers
from runbook.reach.kube import KUBECTL_DEADLINE_S, ServerAnswer, kubectl
from runbook.run import reads
from runbook.run.files import text
from runbook.run.poll import awaited, failure, until
from runbook.run.reads import found, live_object


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

    def probe(in_wait=True):
        objects = found(
            (f"namespace/{namespace_name}", "serviceaccount/default"),
            namespace=namespace_name,
            context=context,
            in_wait=in_wait,
        )
        return of_kind(objects, "Namespace"), of_kind(objects, "ServiceAccount")

    ns, account = probe(in_wait=False)
    if ns and ns[0]["metadata"].get("deletionTimestamp"):
        yield until(
            f"namespace {namespace_name} to finish terminating",
            probe,
            lambda seen: (not seen[0], "terminating" if seen[0] else "gone"),
            timeout_s,
        )
        ns = account = []
    if not ns:
        yield changes(context, "create", "namespace", namespace_name)
    if not account:
        yield until(
            f"ServiceAccount {namespace_name}/default",
            probe,
            lambda seen: (bool(seen[1]), "present" if seen[1] else "absent"),
            timeout_s,
        )


def changes(context: str, *args, deadline_s: int = KUBECTL_DEADLINE_S) -> str:
    """A kubectl command that changes the cluster (the run's cluster read goes stale)."""
    return reads.cluster_changes(kubectl(context, *args, deadline_s=deadline_s))


def applied(path: str, context: str = "", live_objects: bool = True):
    """
    The command making a manifest file's objects live as it says: ``kubectl apply``, or, where the
    API server refuses to update live objects while they are valid as written (a field that
    cannot change in place differs, see ``ServerAnswer``), ``kubectl replace --force``: delete and
    create, said in the log. The server is asked only about live objects (``live_objects``), while
    executing, once the file holds what is applied; a plan shows the apply.

    .. code:: python

        yield from applied("/root/gpuop/k8s/runtimeclass.yaml", context="kwok-gpuop-lab")
    """
    if live_objects and host.state.is_executing:
        answer = host.get_fact(ServerAnswer, path=path, context=context)
        if answer["recreate"]:
            logger.warning(
                f"{host.print_prefix}the API refuses to update {path} in place "
                f"({answer['refused']}); recreating its objects"
            )
            yield changes(context, "replace", "--force", "--filename", path)
            return
    yield changes(context, "apply", "--filename", path)


@operation()
def manifest(path: str, content: str, context: str = ""):
    """
    Ensure a manifest file holds ``content`` and its objects are live as it says. The file is
    applied only when a field it sets differs on the cluster; an object whose differing field
    cannot change in place is recreated (see ``applied``).

    + path: the manifest file on the target
    + content: its YAML text
    + context: kubeconfig context, empty for the current one

    .. code:: python

        manifest(path="/root/gpuop/k8s/gpu-pod.yaml", content=pod_yaml)
    """
    yield from text._inner(path=path, content=content, backup=False)
    want = list(yaml.safe_load_all(content))
    have = [live_object(ref(obj), obj["metadata"].get("namespace"), context) for obj in want]
    if any(h is None or differences(obj, h) for obj, h in zip(want, have)):
        yield from applied(path, context, live_objects=any(h is not None for h in have))


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
    have = live_object(f"node/{node}", context=context)
    if have is None:
        yield failure(f"node {node} not found in the cluster")
        return
    want = None if count is None else str(count)
    if advertised(have) != {"capacity": want, "allocatable": want}:
        yield changes(
            context, "patch", "node", node, "--subresource=status", "--type=merge", "--patch", gpu_patch(count)
        )


def _pod_state(pod):
    if pod is None:
        return "absent"
    cond = pod_scheduled(pod) or {}
    where = pod["spec"].get("nodeName") or "no node"
    scheduled = f"PodScheduled {cond.get('status', 'unset')} {cond.get('reason', '')}"
    return f"phase {pod['status'].get('phase')}, on {where}, {scheduled}".rstrip()


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
    yield from awaited(
        f"the scheduler's decision on Pod {namespace}/{pod}",
        live_object(f"pod/{pod}", namespace, context),
        lambda: live_object(f"pod/{pod}", namespace, context, in_wait=True),
        lambda seen: (bool(seen and pod_scheduled(seen)), _pod_state(seen)),
        timeout_s,
    )


@operation()
def pod_running(pod: str, namespace: str, context: str = "", timeout_s: int = 120):
    """
    Wait until a Pod is bound and Running.

    .. code:: python

        pod_running(pod="cuda-probe", namespace="gpu-lab")
    """
    yield from awaited(
        f"Pod {namespace}/{pod} Running",
        live_object(f"pod/{pod}", namespace, context),
        lambda: live_object(f"pod/{pod}", namespace, context, in_wait=True),
        lambda seen: (bool(seen and seen["status"].get("phase") == "Running"), _pod_state(seen)),
        timeout_s,
    )


@operation()
def node_takes_pods(node: str, context: str = "", timeout_s: int = 120):
    """
    Wait until a node takes Pods: registered, Ready, and without the not-ready taint (a real
    kubelet registers once its runtime answers, and reports Ready seconds later).

    .. code:: python

        node_takes_pods(node="lab-node-0")
    """
    yield from awaited(
        f"node {node} Ready and taking Pods",
        live_object(f"node/{node}", context=context),
        lambda: live_object(f"node/{node}", context=context, in_wait=True),
        node_ready,
        timeout_s,
    )


@operation()
def node_reports_handler(node: str, handler: str, moment: str = "", context: str = "", timeout_s: int = 120):
    """
    Wait until a real node's kubelet reports ``handler`` among its runtime's handlers
    (``Node.status.runtimeHandlers``, which it copies from CRI at its next status update), in a
    status posted long enough after the runtime's restart recorded in ``moment`` (a status from
    before it may still name handlers of an older daemon); a node that reports none (containerd
    1.x) has nothing to wait for.

    .. code:: python

        node_reports_handler(node="lab-node-0", handler="nvidia", moment=".../.gpuop/restart.stamp")
    """
    since = moment_of(moment) if moment else None

    def reported(seen):
        handlers = api_handlers(seen) if seen else []
        fresh = since is None or (bool(seen) and reported_since(seen, since))
        return handlers is None or (handler in handlers and fresh), f"it reports {handlers}" + (
            "" if fresh else f" in a status from before the restart at {since.isoformat()} settled"
        )

    yield from awaited(
        f"node {node}'s kubelet to report handler {handler}",
        live_object(f"node/{node}", context=context),
        lambda: live_object(f"node/{node}", context=context, in_wait=True),
        reported,
        timeout_s,
    )


def moment_of(path: str):
    """The moment a file on the target records (``runbook.replay.containerd.rebooted``), or None."""
    found = reads.files((path,)).get(path)
    try:
        return datetime.fromisoformat(found["text"].strip()) if found else None
    except ValueError:
        return None  # "planned": the run is a plan


@operation()
def node_reports_restart(node: str, moment: str, context: str = "", timeout_s: int = 120):
    """
    Wait until a real node's kubelet reports on its runtime as restarted at the moment recorded in
    ``moment``: a status posted long enough after it (``REBOOT_SETTLE_S``) whose Ready is what the
    lab containerd's restart forecast (restart.txt's) says: False (the runtime down) where its CRI
    fails, True where it loads. A wait that ends otherwise fails naming what the node said.

    .. code:: python

        node_reports_restart(node="lab-node-0", moment=".../.gpuop/reboot.txt.stamp")
    """
    since, forecast = moment_of(moment), reads.containerd()["restart"]
    if since is None or forecast is None:
        return
    want = "True" if forecast["cri_ok"] else "False"

    def said(live):
        cond = ready_condition(live or {})
        words = f"Ready {cond.get('status', 'unset')} ({cond.get('reason', '')}: {cond.get('message', '')})"
        return bool(live) and reported_since(live, since) and cond.get("status") == want, words

    yield until(
        f"{node}'s kubelet to report Ready {want} after the restart, as forecast",
        lambda: live_object(f"node/{node}", context=context, in_wait=True),
        said,
        timeout_s,
    )


def pod_and_events(pod: str, namespace: str, context: str = "", in_wait: bool = False):
    """The live Pod (or None) and its namespace's Events, in one read (see ``found``)."""
    objects = found("pods,events", namespace, context, in_wait)
    pods = of_kind(objects, "Pod", pod)
    return (pods[0] if pods else None), of_kind(objects, "Event")


@operation()
def pod_sandbox_failed(pod: str, namespace: str, context: str = "", timeout_s: int = 120):
    """
    Wait until the kubelet of a Pod's node has failed to create its sandbox (its
    ``FailedCreatePodSandBox`` event), as a Pod whose runtime handler the node's containerd does
    not hold fails.

    .. code:: python

        pod_sandbox_failed(pod="cuda-probe", namespace="gpu-lab")
    """

    def failed(seen):
        live, events = seen
        event = sandbox_failure(events, live) if live else None
        return bool(event), (event["message"] if event else _pod_state(live))

    yield from awaited(
        f"the kubelet's sandbox failure for Pod {namespace}/{pod}",
        pod_and_events(pod, namespace, context),
        lambda: pod_and_events(pod, namespace, context, in_wait=True),
        failed,
        timeout_s,
    )


def deleted(resources: str, namespace=None, context: str = "", timeout_s: int = 120) -> StringCommand:
    """The command deleting objects (``"kind/name kind/name"``) and waiting, up to ``timeout_s``,
    until they are gone; one that is not gone by then fails, and kubectl names it."""
    ns = ("--namespace", namespace) if namespace else ()
    deadline_s = timeout_s + KUBECTL_DEADLINE_S
    return StringCommand(
        changes(
            context,
            "delete",
            *resources.split(),
            *ns,
            "--ignore-not-found",
            "--wait=true",
            f"--timeout={timeout_s}s",
            deadline_s=deadline_s,
        ),
        _timeout=deadline_s + 10,
    )


def daemonset_and_pods(name, namespace, context="", in_wait=False):
    """The live DaemonSet (or None) and the Pods of its namespace, in one read (see ``found``)."""
    objects = found("daemonsets,pods", namespace, context, in_wait)
    ds = of_kind(objects, "DaemonSet", name)
    return (ds[0] if ds else None), of_kind(objects, "Pod")


@operation()
def daemonset_ready(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until every node runs a Ready Pod of the DaemonSet's current spec.

    .. code:: python

        daemonset_ready(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    yield from awaited(
        f"all Pods of DaemonSet {namespace}/{daemonset} Ready",
        daemonset_and_pods(daemonset, namespace, context),
        lambda: daemonset_and_pods(daemonset, namespace, context, in_wait=True),
        lambda seen: (bool(seen[0]) and rollout_complete(seen[0]), describe_rollout(*seen)),
        timeout_s,
    )


@operation()
def daemonset_settled(daemonset: str, namespace: str, context: str = "", timeout_s: int = 180):
    """
    Wait until a DaemonSet rollout has gone as far as it can: complete, or stalled on an updated
    Pod that no node can take.

    .. code:: python

        daemonset_settled(daemonset="nvidia-container-toolkit", namespace="gpu-operator")
    """
    yield from awaited(
        f"the rollout of DaemonSet {namespace}/{daemonset} to complete or stall",
        daemonset_and_pods(daemonset, namespace, context),
        lambda: daemonset_and_pods(daemonset, namespace, context, in_wait=True),
        lambda seen: (bool(seen[0]) and rollout_settled(*seen), describe_rollout(*seen)),
        timeout_s,
    )
