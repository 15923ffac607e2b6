"""Time-slicing arithmetic: slots multiply, memory does not divide."""

import jmespath
import yaml

from gpuop.judgment.cluster import GPU


def sharing_config(replicas: int, resource: str = GPU) -> dict:
    """The GPU Operator device-plugin config for time-slicing one resource.

    yaml.safe_dump(sharing_config(5)) -> "sharing:\\n  timeSlicing:\\n ..."
    """
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": resource, "replicas": replicas}],
            },
        },
    }


def replicas_of(config_text: str, resource: str = GPU):
    """The replicas a device-plugin config (the ConfigMap's ``data.any`` string) gives a resource.

    replicas_of(yaml.safe_dump(sharing_config(5))) -> 5
    """
    doc = yaml.safe_load(config_text) or {}
    return jmespath.search(f"sharing.timeSlicing.resources[?name=='{resource}'].replicas | [0]", doc)


def slot_lines(physical_gpus: int, replicas: int, advertised: int, vram_per_gpu_gib: int) -> list:
    """The seven lines of slots.txt.

    Time-slicing shares each GPU among ``replicas`` slots in time only: a slot is guaranteed no
    memory, every slot on a GPU shares all of its VRAM, and nothing isolates memory or faults.

        slot_lines(4, 5, 20, 40)[-3:]
        -> ["VRAM_GUARANTEED_PER_SLOT_GIB=0", "VRAM_SHARED_PER_GPU_GIB=40", "ISOLATION=none"]
    """
    return [
        f"PHYSICAL_GPUS={physical_gpus}",
        f"REPLICAS={replicas}",
        f"ADVERTISED={advertised}",
        f"VRAM_PER_GPU_GIB={vram_per_gpu_gib}",
        "VRAM_GUARANTEED_PER_SLOT_GIB=0",
        f"VRAM_SHARED_PER_GPU_GIB={vram_per_gpu_gib}",
        "ISOLATION=none",
    ]
