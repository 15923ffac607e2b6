"""A real node's read (as NodeRuntime gives it) and the cluster around it, as the unit tests build them."""

import subprocess
from functools import partial

import tomli_w

from gpuop.judgment.configs import nvidia_dropin, seed_config
from gpuop.reach.node_read import node_read
from tests.helpers import objects

CONFIG = "/etc/containerd/config.toml"


SOCKET = "/run/containerd/containerd.sock"


MAIN = tomli_w.dumps(seed_config("/etc/containerd/conf.d/*.toml"))


def daemon(
    loaded=("runc",),
    after=("runc",),
    cri="ok",
    cri_ok=True,
    starts=True,
    files=None,
    address=SOCKET,
    version="1.6.20",
    pid=10,
    serves=True,
):
    if not serves:  # the read asks only the node's runtime
        return {
            "pid": pid,
            "exe": "/usr/bin/containerd",
            "args": [],
            "config": CONFIG,
            "address": address,
            "serves": False,
            "files": {},
            "restart": None,
            "loaded": None,
        }
    return {
        "pid": pid,
        "exe": "/usr/bin/containerd",
        "args": ["/usr/bin/containerd"],
        "config": CONFIG,
        "address": address,
        "serves": True,
        "files": files if files is not None else {CONFIG: {"mode": "644", "text": MAIN}},
        "loaded": {
            "cri": cri,
            "runtimes": list(loaded) if cri == "ok" else [],
            "default_runtime": "runc",
            "error": "" if cri == "ok" else "unknown service runtime.v1.RuntimeService",
            "crictl": True,
        },
        "restart": {
            "version": version,
            "runtimes": list(after),
            "default_runtime": "runc",
            "cri_ok": cri_ok,
            "reason": "" if cri_ok else 'default_runtime_name "runc" has no runtime',
            "starts": starts,
        },
    }


def read(*containerds, kubelet=None):
    return {"hostname": "gpu-a", "containerds": list(containerds), "kubelet": kubelet}


node = objects.node  # 4 GPUs


pod = partial(objects.pod, runtime_class="nvidia", ready=True)  # Running, Ready, of RuntimeClass nvidia


RC = {"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


def kinds(gaps):
    return sorted((g["kind"], g["subject"]) for g in gaps)


def gpu_pod(name, node_name="gpu-a"):
    """A GPU Pod with no RuntimeClass, as the GPU Operator's CDI mode runs them."""
    p = pod(name, node_name, runtime_class=None)
    p["spec"]["containers"] = [{"name": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    return p


def with_cdi(d, enabled, dirs=("/etc/cdi", "/var/run/cdi"), specs=(), default="runc"):
    d["loaded"].update(cdi=enabled, cdi_spec_dirs=list(dirs), default_runtime=default)
    d["gpu_cdi_specs"] = list(specs)
    return d


DROPIN = tomli_w.dumps(nvidia_dropin())


def read_shell(body: str, timeout_s: int = 20) -> subprocess.CompletedProcess:
    """``body`` run after the node read's own definitions, exactly as node_read sends them."""
    defined, last = node_read("crictl").rsplit("\n", 1)
    assert last == "read_node"
    return subprocess.run(["sh", "-c", f"{defined}\n{body}"], capture_output=True, text=True, timeout=timeout_s)
