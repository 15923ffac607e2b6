"""The one builder of the Node and Pod objects the unit tests judge, as the API gives them (plain
JSON). Each family of tests sets its own defaults with ``functools.partial`` beside its reads
(``nodereads``, ``crioreads``, ``labviews``)."""


def node(name: str = "gpu-a", gpus: int | None = 4) -> dict:
    """A Node with 8 CPUs and ``gpus`` ``nvidia.com/gpu`` allocatable (None: none advertised).

    node("gpu-a", 8)["status"]["allocatable"] -> {"cpu": "8", "nvidia.com/gpu": "8"}
    """
    alloc = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus is not None else {})}
    return {"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(
    name: str,
    node_name: str | None = "gpu-a",
    runtime_class: str | None = "",
    gpus: int = 0,
    *,
    namespace: str = "ns",
    phase: str = "Running",
    ready: bool | None = None,
    owner: str = "",
    owner_uid: str = "",
    pending_message: str = "",
    image: str = "",
    template_generation: int | None = None,
    terminating: bool = False,
) -> dict:
    """A Pod bound to ``node_name`` (None: not bound), of ``runtime_class`` (empty: none), one
    container asking ``gpus`` ``nvidia.com/gpu``; ``ready``: its Ready condition (None: none);
    ``owner``, ``owner_uid``: the DaemonSet that owns it, by name or uid; ``pending_message``: the
    scheduler refused it so; ``image``: its container's; ``template_generation``: its DaemonSet's
    template it was made from (the controller's label); ``terminating``: being deleted.

    pod("train", gpus=1)["spec"]["containers"][0]["resources"] -> {"limits": {"nvidia.com/gpu": "1"}}
    """
    labels = {} if template_generation is None else {"pod-template-generation": str(template_generation)}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    if owner or owner_uid:
        meta["ownerReferences"] = [{"kind": "DaemonSet", **({"name": owner} if owner else {"uid": owner_uid})}]
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "c", **({"image": image} if image else {}), "resources": {"limits": limits}}
    spec = {
        **({"nodeName": node_name} if node_name else {}),
        **({"runtimeClassName": runtime_class} if runtime_class else {}),
        "containers": [container],
    }
    conditions = [] if ready is None else [{"type": "Ready", "status": str(ready)}]
    if pending_message:
        conditions.append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": pending_message}
        )
    status = {"phase": "Pending" if pending_message else phase, **({"conditions": conditions} if conditions else {})}
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}
