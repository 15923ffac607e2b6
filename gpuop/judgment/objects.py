"""Kubernetes objects as kubectl returns them: picking them out of a mixed read, and desired
against live (which fields the playbook sets differ on the cluster)."""

from gpuop.judgment.quantity import parse_quantity


def of_kind(objects: list, kind: str, name: str | None = None) -> list:
    """The objects of one kind (and name) among a mixed ``kubectl get`` result.

    of_kind([{"kind": "Node", "metadata": {"name": "lab-node-0"}}, ...], "Node") -> [{"kind": "Node", ...}]
    """
    return [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]


def ref(obj: dict) -> str:
    """An object's name as kubectl shows it: ``namespace/name``, or ``name`` where it has none.

    ref({"metadata": {"namespace": "gpu-lab", "name": "cuda-probe"}}) -> "gpu-lab/cuda-probe"
    """
    ns = obj["metadata"].get("namespace")
    return f"{ns}/{obj['metadata']['name']}" if ns else obj["metadata"]["name"]


# Under these keys values are quantities: "1" and 1, or "0.5Gi" and "512Mi", are the same.
_QUANTITY_PARENTS = {"limits", "requests", "capacity", "allocatable"}


def _same_scalar(desired, live, quantity) -> bool:
    if quantity:
        try:
            return parse_quantity(str(desired)) == parse_quantity(str(live))
        except ValueError:
            return False
    return desired == live


def differences(desired, live, path="", quantities=False) -> list:
    """Paths of the fields set in ``desired`` that ``live`` lacks or holds differently.

    Fields the API server adds (defaults, status, metadata) are ignored: only what the manifest
    says is compared. Lists compare item by item and must have the same length.

        differences({"spec": {"handler": "nvidia"}}, {"spec": {"handler": "runc"}}) -> ["spec.handler"]
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [path or "."]
        found = []
        for key, value in desired.items():
            sub = f"{path}.{key}" if path else key
            if key not in live:
                found.append(sub)
            else:
                found.extend(differences(value, live[key], sub, quantities or key in _QUANTITY_PARENTS))
        return found
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            return [path]
        found = []
        for index, (want, have) in enumerate(zip(desired, live)):
            found.extend(differences(want, have, f"{path}[{index}]"))
        return found
    return [] if _same_scalar(desired, live, quantities) else [path]
