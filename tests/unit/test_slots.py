import yaml

from gpuop.judgment.slots import replicas_of, sharing_config, slot_lines


def test_sharing_config_is_the_device_plugin_format():
    doc = sharing_config(5)
    ts = doc["sharing"]["timeSlicing"]
    assert ts["failRequestsGreaterThanOne"] is True
    assert ts["resources"][0] == {"name": "nvidia.com/gpu", "replicas": 5}


def test_replicas_read_back_from_the_configmap_string():
    assert replicas_of(yaml.safe_dump(sharing_config(7))) == 7
    assert replicas_of("sharing: {}") is None


def test_slots_multiply_but_memory_does_not_divide():
    assert slot_lines(4, 5, 20, 40) == [
        "PHYSICAL_GPUS=4",
        "REPLICAS=5",
        "ADVERTISED=20",
        "VRAM_PER_GPU_GIB=40",
        "VRAM_GUARANTEED_PER_SLOT_GIB=0",
        "VRAM_SHARED_PER_GPU_GIB=40",
        "ISOLATION=none",
    ]
    assert slot_lines(2, 3, 6, 80)[4:6] == ["VRAM_GUARANTEED_PER_SLOT_GIB=0", "VRAM_SHARED_PER_GPU_GIB=80"]
