"""The reports the seed's lab fixes byte for byte (docs/playbook.md), for the lab's default knobs."""

MERGE = """MAIN_RUNTIMES=runc
DROPIN_RUNTIMES=nvidia
CONFLICT=yes
CONFLICT_TABLE=plugins."io.containerd.grpc.v1.cri".containerd.runtimes
LOADED_RUNTIMES=runc
"""
# unscheduled.txt: the PodScheduled condition as the lab's scheduler (Kubernetes 1.36) words it;
# the seed's example is an older scheduler's ("3 No preemption victims found for incoming pod.").
UNSCHEDULED = (
    "Unschedulable\n0/3 nodes are available: 3 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.\n"
)
NODE_GPU = "NAME GPU\nlab-node-0 4\nlab-node-1 0\nlab-node-2 0\n"
SLOTS = """PHYSICAL_GPUS=4
REPLICAS=5
ADVERTISED=20
VRAM_PER_GPU_GIB=40
VRAM_GUARANTEED_PER_SLOT_GIB=0
VRAM_SHARED_PER_GPU_GIB=40
ISOLATION=none
"""
ROLLOUT = """DESIRED=3
UPDATED=1
READY=2
OLD_IMAGE_PODS=2
MAX_UNAVAILABLE=1
BLOCKER=insufficient-memory
"""

# A `containerd config dump` in which the nvidia handler is loaded (for a fake containerd).
LOADED_NVIDIA = (
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
)

# restart.txt on the incident lab with Debian's containerd 1.6.20: the drop-in replaces the CRI
# section at the next start, runc is gone, and the CRI plugin refuses to load.
RESTART = (
    "CONTAINERD_VERSION=1.6.20\n"
    "LOADED_RUNTIMES=runc\n"
    "LOADED_FROM=cri\n"
    "RESTART_RUNTIMES=nvidia\n"
    "RESTART_CRI=fails\n"
    'RESTART_REASON=default_runtime_name "runc" has no runtime in containerd.runtimes (configured: nvidia); '
    "containerd 1.6: the runtimes an imported file names replace the main config's whole; "
    "a version above 2 is not checked (1.6.32 and 1.7.17 stop the daemon on it)\n"
)
