"""A node's Pods as the repair sees them: what a drain does with each (``drainable``, as ``kubectl
drain`` decides), the data an eviction deletes (``local_storage``), and the GPUs a probe Pod may ask
of the device plugin or claim of a DRA driver (``free_gpus``, ``free_devices``). Pure: no I/O."""

from gpuop.judgment.cluster import active, allocatable_count, gpus_asked
from gpuop.judgment.objects import of_kind
from gpuop.reach.nodepod import MANAGED_BY


def drainable(pod: dict) -> str:
    """How a drain treats a Pod on the node: ``stays`` (a DaemonSet's, a mirror Pod, ended, gpuop's
    own short-lived read or probe Pod), ``evict`` (a controller owns it: it comes back elsewhere), ``unmanaged``
    (nothing brings it
    back: it stops the drain unless told to delete it), as ``kubectl drain`` treats them.

        drainable({"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "controller": True}]}, ...}) -> "evict"
    """
    meta = pod["metadata"]
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}) or not active(pod):
        return "stays"
    if MANAGED_BY.items() <= (meta.get("labels") or {}).items():  # ends on its own: the repair reads through one
        return "stays"
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return "stays"
    return "evict" if owners else "unmanaged"


def local_storage(pod: dict) -> list:
    """The ``emptyDir`` volumes of a Pod (any medium), whose data an eviction deletes: as
    ``kubectl drain`` decides it, such a Pod stops a drain unless told to delete that data
    (``--delete-emptydir-data``). A training job's checkpoint scratch is exactly that.

        local_storage({"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}, ...}) -> ["scratch"]
    """
    return [v["name"] for v in pod["spec"].get("volumes") or [] if "emptyDir" in v]


def free_gpus(node: dict, pods: list) -> int:
    """The GPUs ``node`` advertises (``nvidia.com/gpu``) that no Pod on it holds now: what a probe
    Pod may ask for, so that the device plugin's allocation goes through the repaired runtime.

        free_gpus({"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}, []) -> 4
    """
    name = node["metadata"]["name"]
    held = sum(gpus_asked(p) for p in pods if p["spec"].get("nodeName") == name and active(p))
    return max(0, allocatable_count(node) - held)


def free_devices(name: str, objects: list, driver: str) -> int:
    """The devices of ``driver`` node ``name``'s ResourceSlices publish (DRA) that no
    ResourceClaim holds now: where a probe Pod may claim one, so that the driver's allocation goes
    through the repaired runtime.

        free_devices("gpu-a", [slice_of_two_gpus, claim_of_one], "gpu.nvidia.com") -> 1
    """
    published = {
        (s["spec"].get("pool", {}).get("name"), d["name"])
        for s in of_kind(objects, "ResourceSlice")
        if s["spec"].get("nodeName") == name and s["spec"].get("driver") == driver
        for d in s["spec"].get("devices") or []
    }
    held = {
        (r.get("pool"), r.get("device"))
        for c in of_kind(objects, "ResourceClaim")
        for r in ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or [])
        if r.get("driver") == driver
    }
    return len(published - held)
