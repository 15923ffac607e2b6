"""The incident's objects by name, and the manifests and scripts rendered from templates/.

manifest("runtimeclass.yaml", runtime_class="nvidia", handler="nvidia")
"""

import os

from pyinfra.api.util import get_template

from runbook import PROJECT

TEMPLATES = os.path.join(PROJECT, "templates")

GPU_NAMESPACE = "gpu-lab"
GPU_POD = "cuda-probe"
RUNTIME_CLASS = "nvidia"
HANDLER = "nvidia"  # RuntimeClass nvidia's handler: the runtime the toolkit's drop-in adds
OPERATOR_NAMESPACE = "gpu-operator"
TIME_SLICING = "time-slicing-config"
TOOLKIT = "nvidia-container-toolkit"

REPORTS = ("merge.txt", "restart.txt", "unscheduled.txt", "node-gpu.txt", "slots.txt", "rollout.txt")
KUBELET_NODE_REPORTS = ("sandbox.txt", "reboot.txt")  # where a real kubelet runs gpu_node (kubelet_node)
MANIFESTS = ("runtimeclass.yaml", "gpu-pod.yaml", "time-slicing.yaml", "toolkit-ds.yaml")


def manifest(name: str, **values) -> str:
    """A manifest or script rendered from templates/<name>.j2."""
    return get_template(os.path.join(TEMPLATES, name + ".j2")).render(**values)


def gpu_pod() -> str:
    """The GPU Pod: RuntimeClass nvidia, one nvidia.com/gpu."""
    return manifest("gpu-pod.yaml", pod=GPU_POD, namespace=GPU_NAMESPACE, runtime_class=RUNTIME_CLASS)


def runtime_class() -> str:
    """The RuntimeClass nvidia, whose handler is the nvidia runtime."""
    return manifest("runtimeclass.yaml", runtime_class=RUNTIME_CLASS, handler=HANDLER)


def toolkit(lab, version: str, memory: str) -> str:
    """The toolkit DaemonSet at an image tag, asking ``memory``."""
    return manifest(
        "toolkit-ds.yaml",
        daemonset=TOOLKIT,
        namespace=OPERATOR_NAMESPACE,
        image=f"{lab.toolkit_image}:{version}",
        memory=memory,
        max_unavailable=lab.max_unavailable,
    )
