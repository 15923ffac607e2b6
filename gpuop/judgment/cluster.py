"""Reading live Kubernetes objects (plain dicts from ``kubectl -o json``) with jmespath."""

from datetime import datetime

import jmespath

from gpuop.judgment.objects import of_kind
from gpuop.judgment.quantity import parse_quantity
from gpuop.judgment.scheduling import blocker, pod_scheduled, unschedulable

_READY = "status.conditions[?type=='Ready'].status | [0]"
_SANDBOX = "status.conditions[?type=='PodReadyToStartContainers'].status | [0]"

GPU = "nvidia.com/gpu"


def ready(obj: dict) -> bool:
    """Whether a Pod's or a Node's Ready condition is True.

    ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}) -> True
    """
    return jmespath.search(_READY, obj) == "True"


def has_sandbox(pod: dict) -> bool:
    """Whether a Pod's sandbox runs: its PodReadyToStartContainers condition is True (kubelet
    1.29 on); where kubelet sets none, whether it left Pending.

        has_sandbox({"status": {"phase": "Pending", "conditions": [{"type": "PodReadyToStartContainers", "status":
            "False"}]}}) -> False
    """
    said = jmespath.search(_SANDBOX, pod)
    return said == "True" if said is not None else (pod.get("status") or {}).get("phase") not in (None, "Pending")


def advertised(node: dict, resource: str = GPU) -> dict:
    """A node's advertisement of one resource: {"capacity": str|None, "allocatable": str|None}.

    advertised(node) -> {"capacity": "4", "allocatable": "4"}
    """
    status = node.get("status") or {}
    return {field: (status.get(field) or {}).get(resource) for field in ("capacity", "allocatable")}


def allocatable_count(node: dict, resource: str = GPU) -> int:
    """How many of a resource a node offers the scheduler, 0 when it advertises none."""
    value = advertised(node, resource)["allocatable"]
    return int(parse_quantity(value)) if value is not None else 0


def gpus_asked(pod: dict) -> int:
    """GPUs a Pod holds: its containers' limits (or requests) of nvidia.com/gpu.

    gpus_asked({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}) -> 1
    """
    total = 0
    for container in pod["spec"].get("containers", []):
        res = container.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU, (res.get("requests") or {}).get(GPU))
        total += int(parse_quantity(str(value))) if value is not None else 0
    return total


def node_gpu_lines(nodes: list, names: list) -> list:
    """The node-gpu.txt table: every lab node and its allocatable GPUs, in the lab's order.

    node_gpu_lines(nodes, ["lab-node-0", "lab-node-1"]) -> ["NAME GPU", "lab-node-0 4", ...]
    """
    by_name = {n["metadata"]["name"]: n for n in nodes}
    return ["NAME GPU"] + [f"{name} {allocatable_count(by_name[name])}" for name in names]


def template_images(ds: dict) -> list:
    return jmespath.search("spec.template.spec.containers[].image", ds) or []


def owned_pods(ds: dict, pods: list) -> list:
    """The DaemonSet's live Pods (owned by it, not terminating)."""
    uid = ds["metadata"]["uid"]
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and uid in (jmespath.search("metadata.ownerReferences[].uid", p) or [])
    ]


# The generation of the DaemonSet's template: its metadata.generation also counts changes outside
# the template (maxUnavailable), which start no rollout.
_TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def updated_pods(ds: dict, pods: list) -> list:
    """Pods of the DaemonSet's current template (the controller labels each with the template's
    generation, which it keeps in an annotation of the DaemonSet)."""
    meta = ds["metadata"]
    gen = (meta.get("annotations") or {}).get(_TEMPLATE_GENERATION, str(meta["generation"]))
    return [p for p in owned_pods(ds, pods) if p["metadata"].get("labels", {}).get("pod-template-generation") == gen]


def rollout_status(ds: dict, pods: list) -> dict:
    """The rollout as rollout.txt reports it, from the DaemonSet's status and its Pods.

    BLOCKER comes from the scheduling condition of an updated Pod the scheduler could not
    place; ``none`` when no updated Pod is stuck.

        rollout_status(ds, pods) -> {"DESIRED": 3, "UPDATED": 1, "READY": 2, ...}
    """
    status = ds.get("status") or {}
    images = template_images(ds)
    mine = owned_pods(ds, pods)
    stuck = [pod_scheduled(p) for p in updated_pods(ds, pods) if (pod_scheduled(p) or {}).get("status") == "False"]
    return {
        "DESIRED": status.get("desiredNumberScheduled", 0),
        "UPDATED": status.get("updatedNumberScheduled", 0),
        "READY": status.get("numberReady", 0),
        "OLD_IMAGE_PODS": sum(1 for p in mine if jmespath.search("spec.containers[].image", p) != images),
        "MAX_UNAVAILABLE": jmespath.search("spec.updateStrategy.rollingUpdate.maxUnavailable", ds),
        "BLOCKER": blocker(stuck[0].get("message", "")) if stuck else "none",
    }


def rollout_settled(ds: dict, pods: list) -> bool:
    """Whether a rollout has gone as far as it can: complete, or stalled on a Pod no node takes.

    Stalled means the controller has seen the current spec, every node has a Pod, and as many
    updated Pods are unschedulable as maxUnavailable lets it take down.
    """
    status = ds.get("status") or {}
    if status.get("observedGeneration", 0) < ds["metadata"]["generation"]:
        return False
    desired = status.get("desiredNumberScheduled", 0)
    if rollout_complete(ds):
        return True
    mine = owned_pods(ds, pods)
    stuck = [p for p in updated_pods(ds, pods) if unschedulable(p)]
    ready_pods = [p for p in mine if ready(p)]
    max_unavailable = jmespath.search("spec.updateStrategy.rollingUpdate.maxUnavailable", ds)
    return (
        bool(stuck)
        and len(mine) == desired
        and status.get("numberReady", 0) == len(ready_pods)
        and status.get("numberUnavailable", 0) >= _count(max_unavailable, desired)
    )


def rollout_complete(ds: dict) -> bool:
    """Whether every node runs a Ready, available Pod of the DaemonSet's current spec."""
    status = ds.get("status") or {}
    desired = status.get("desiredNumberScheduled", 0)
    return (
        status.get("observedGeneration", 0) >= ds["metadata"]["generation"]
        and status.get("updatedNumberScheduled", 0) == desired
        and status.get("numberReady", 0) == desired
        and status.get("numberAvailable", 0) == desired
    )


def _count(value, total: int) -> int:
    """maxUnavailable as a count: an int, or a percentage of ``total`` (rounded up, like the controller)."""
    if isinstance(value, str) and value.endswith("%"):
        return max(1, -(-int(value[:-1]) * total // 100))
    return int(value)


def rollout_lines(ds: dict, pods: list) -> list:
    """The six lines of rollout.txt."""
    return [f"{key}={value}" for key, value in rollout_status(ds, pods).items()]


def describe_rollout(ds: dict | None, pods: list) -> str:
    """A rollout in a few words, for progress and timeout messages."""
    if ds is None:
        return "DaemonSet absent"
    s = ds.get("status") or {}
    return (
        f"generation {ds['metadata']['generation']} observed {s.get('observedGeneration', 0)}, "
        f"desired {s.get('desiredNumberScheduled', 0)}, updated {s.get('updatedNumberScheduled', 0)}, "
        f"ready {s.get('numberReady', 0)}, unavailable {s.get('numberUnavailable', 0)}"
    )


def nodes_too_small(nodes: list, names, memory: str) -> list:
    """The lab nodes whose allocatable memory is below a Pod's memory request, as
    ``(name, allocatable)``: a DaemonSet asking ``memory`` completes only where this is empty.

        nodes_too_small(nodes, ["lab-node-0"], "64Gi") -> [("lab-node-0", "32Gi")]
    """
    want = parse_quantity(memory)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    small = []
    for name in names:
        have = ((by_name.get(name) or {}).get("status") or {}).get("allocatable", {}).get("memory", "0")
        if parse_quantity(have) < want:
            small.append((name, have))
    return small


SANDBOX_FAILED = "FailedCreatePodSandBox"  # the kubelet's event reason when a Pod's sandbox cannot start
_NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def node_ready(node: dict | None) -> tuple:
    """Whether a node takes Pods (Ready True, no not-ready or unreachable taint), and in words.

    node_ready(node) -> (False, "Ready False (KubeletNotReady: container runtime is down), taints
        node.kubernetes.io/not-ready")
    """
    if node is None:
        return False, "not registered"
    cond = next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)
    taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or [] if t["key"] in _NOT_READY_TAINTS]
    if cond is None:
        return False, "no Ready condition yet"
    words = f"Ready {cond['status']}"
    if cond["status"] != "True":
        words += f" ({cond.get('reason', '')}: {cond.get('message', '')})"
    if taints:
        words += f", taints {', '.join(taints)}"
    return cond["status"] == "True" and not taints, words


def _event_time(event: dict) -> str:
    return (
        event.get("lastTimestamp")
        or (event.get("series") or {}).get("lastObservedTime")
        or event.get("eventTime")
        or event["metadata"]["creationTimestamp"]
    )


def event_epoch(event: dict) -> float:
    """When an event was last seen, in seconds since the epoch.

    event_epoch({"lastTimestamp": "2026-12-04T04:03:30Z", ...}) -> 1796357010.0
    """
    return datetime.fromisoformat(_event_time(event)).timestamp()


def said_by_kubelet(event: dict, node: str) -> bool:
    """Whether ``event`` is the word of ``node``'s own kubelet, as the kubelet writes its Events
    (``source`` ``{component: kubelet, host: NODE}``, and ``reportingComponent``/``reportingInstance``
    where set). The API server checks neither field: the agent's admission policy keeps agents from
    writing them, and a rule that an Event alone turns True believes no other.

        said_by_kubelet({"source": {"component": "kubelet", "host": "gpu-a"}}, "gpu-a") -> True
    """
    source = event.get("source") or {}
    reporting = event.get("reportingComponent"), event.get("reportingInstance")
    by_source = source.get("component") == "kubelet" and source.get("host") == node
    return by_source and (reporting[0] in (None, "", "kubelet")) and (reporting[1] in (None, "", node))


def sandbox_failure(events: list, pod: dict) -> dict | None:
    """The newest event of the kubelet failing to create this Pod's sandbox (this Pod: its uid, not
    a deleted one's of the same name), or None.

        sandbox_failure(events, pod)["message"] -> 'Failed to create pod sandbox: rpc error: ...'
    """
    uid = pod["metadata"].get("uid")
    mine = [
        e
        for e in events
        if e.get("reason") == SANDBOX_FAILED
        and e["involvedObject"].get("kind") == "Pod"
        and e["involvedObject"].get("name") == pod["metadata"]["name"]
        and e["involvedObject"].get("uid") == uid
    ]
    return max(mine, key=_event_time, default=None)


def sandbox_lines(pod: dict, event: dict, handler: str) -> list:
    """sandbox.txt: the event's reason, then its message, exactly as the API returns them; then
    the runtime handler the Pod asked for and the node that failed it.

        sandbox_lines(pod, event, "nvidia")
        -> ["FailedCreatePodSandBox", "Failed to create pod sandbox: ...", "handler nvidia", "node lab-node-0"]
    """
    return [event["reason"], event["message"], f"handler {handler}", f"node {pod['spec'].get('nodeName')}"]


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def ready_condition(node: dict) -> dict:
    """A node's Ready condition (empty when it has none yet)."""
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


REBOOT_SETTLE_S = 8  # kubelet asks its runtime every 5 s, and posts its status every 2 s (lab/kubeletnode.sh)


def reported_since(node: dict, moment: datetime, settle_s: int = REBOOT_SETTLE_S) -> bool:
    """Whether the node's kubelet posted its Ready condition ``settle_s`` after ``moment``: what it
    says is then about the runtime as it was after that moment.

        reported_since(node, datetime(2026, 12, 1, 15, 0, tzinfo=timezone.utc)) -> True
    """
    beat = ready_condition(node).get("lastHeartbeatTime")
    return bool(beat) and (_time(beat) - moment).total_seconds() >= settle_s


def reboot_lines(forecast_cri_ok: bool, node: dict, moment: datetime) -> list:
    """reboot.txt: what the node's Ready condition says after its containerd restarted at
    ``moment``, against what restart.txt forecast: Ready False (the runtime down) where the CRI
    forecast fails, True where it loads. CHANGED_AFTER_S: how long after the restart the
    condition changed, ``unchanged`` when it did not.

        reboot_lines(False, node, moment)
        -> ["REBOOT_AT=...", "FORECAST_CRI=fails", "READY=False", "REASON=KubeletNotReady",
            "MESSAGE=container runtime is down, ...", "CHANGED_AFTER_S=6", "MATCHES=yes"]
    """
    cond = ready_condition(node)
    changed = cond.get("lastTransitionTime") and _time(cond["lastTransitionTime"]) >= moment.replace(microsecond=0)
    after = max(0, round((_time(cond["lastTransitionTime"]) - moment).total_seconds())) if changed else "unchanged"
    matches = cond.get("status") == ("True" if forecast_cri_ok else "False")
    return [
        f"REBOOT_AT={moment:%Y-%m-%dT%H:%M:%SZ}",
        f"FORECAST_CRI={'ok' if forecast_cri_ok else 'fails'}",
        f"READY={cond.get('status', 'unknown')}",
        f"REASON={cond.get('reason', '')}",
        f"MESSAGE={cond.get('message', '')}",
        f"CHANGED_AFTER_S={after}",
        f"MATCHES={'yes' if matches else 'no'}",
    ]


def active(pod: dict) -> bool:
    """A Pod that runs or will: not ended, not being deleted."""
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def classed_pods(name: str, objects: list) -> list:
    """The active Pods bound to node ``name`` that name a RuntimeClass, each with its class and
    the handler it asks for (the class's, or its own name where the class is gone).

        classed_pods("gpu-a", objects) -> [(pod, "nvidia", "nvidia")]
    """
    handlers = {rc["metadata"]["name"]: rc.get("handler") for rc in of_kind(objects, "RuntimeClass")}
    return [
        (
            pod,
            pod["spec"]["runtimeClassName"],
            handlers.get(pod["spec"]["runtimeClassName"], pod["spec"]["runtimeClassName"]),
        )
        for pod in of_kind(objects, "Pod")
        if pod["spec"].get("nodeName") == name and active(pod) and pod["spec"].get("runtimeClassName")
    ]
