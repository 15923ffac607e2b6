"""The fleet's report: one entry per node (its view and its findings, ``gpuop.view`` and
``gpuop.rules``) and the gaps of the fleet as a whole (its table: ``gpuop.tables``).
"""

from .gaps import gap
from .objects import of_kind


def fleet_gaps(nodes: dict, objects: list) -> list:
    """Gaps of the fleet as a whole: RuntimeClasses whose handler no audited node loads.

        fleet_gaps({"gpu-a": {"loaded": ["runc"], ...}}, objects)
        -> [{"kind": "runtimeclass-handler-nowhere", ...}]
    """
    loaded = {h for n in nodes.values() for h in n["loaded"]}
    return [gap("runtimeclass-handler-nowhere", rc["metadata"]["name"], ["scheduled", "loaded"],
                 f"RuntimeClass {rc['metadata']['name']}: no audited node loads its handler {rc.get('handler')}")
            for rc in of_kind(objects, "RuntimeClass") if rc.get("handler") not in loaded]
