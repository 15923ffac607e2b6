"""Helpers for tests against the real lab cluster: the kubernetes client and kubectl."""

import json
import os
import signal
import subprocess
import time

from kubernetes import client, config

from tests.proc import run

LAB = "gpuop-lab"  # the cluster `make lab-up` starts and the tests drive (its context is current)
LAB_NODES = ("lab-node-0", "lab-node-1", "lab-node-2")
GPU = "nvidia.com/gpu"


def core(context=None) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(context=context))


def apps(context=None) -> client.AppsV1Api:
    return client.AppsV1Api(config.new_client_from_config(context=context))


def kubectl(*args, context=None, check=True, stdin=None, timeout_s=120) -> str:
    pinned = ["--context", context] if context else []
    result = run(["kubectl", *pinned, *args], timeout_s=timeout_s, stdin=stdin)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def get(resource, namespace=None, context=None):
    ns = ["-n", namespace] if namespace else []
    out = kubectl("get", resource, *ns, "-o", "json", "--ignore-not-found", context=context)
    return json.loads(out) if out.strip() else None


def eventually(what, probe, timeout=60.0, interval=0.2):
    """Poll ``probe()`` until it returns something truthy; fail naming what and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if seen:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last seen: {seen!r}")
        time.sleep(interval)


def set_gpus(node, count, context=None):
    value = None if count is None else str(count)
    patch = {"status": {"capacity": {GPU: value}, "allocatable": {GPU: value}}}
    kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch),
            context=context)


def reset_lab(context=None, extra_namespaces=()):
    """The lab as `make lab-up` leaves it: no incident objects, no GPU advertisements."""
    namespaces = ("gpu-lab", "gpu-operator", *extra_namespaces)
    # Workloads first, without grace (no kubelet would honour it), then the namespaces together:
    # the namespace controller alone takes seconds per namespace.
    for ns in namespaces:
        kubectl("delete", "daemonsets,pods", "--all", "-n", ns, "--grace-period=0", "--force",
                "--ignore-not-found", context=context)
    kubectl("delete", "namespace", *namespaces, "--ignore-not-found", "--wait=true", "--timeout=120s",
            context=context, timeout_s=150)
    kubectl("delete", "runtimeclass", "nvidia", "--ignore-not-found", context=context)
    for node in LAB_NODES:
        set_gpus(node, None, context)


def component_pidfile(component: str) -> str:
    """Where kwokctl keeps the pid of one of the lab's control-plane processes."""
    return os.path.expanduser(f"~/.kwok/clusters/{LAB}/pids/{component}.pid")


def kill_component(component: str, sig=signal.SIGKILL) -> int:
    """Kill one control-plane process of the lab (``kube-apiserver``, ``etcd``...); its pid."""
    with open(component_pidfile(component)) as f:
        pid = int(f.read())
    os.kill(pid, sig)
    return pid


def api_ready() -> bool:
    return run(["kubectl", "get", "--raw", "/readyz", "--request-timeout=3s"], timeout_s=10).returncode == 0


def exited(pid: int) -> bool:
    """Whether a process is gone (or a zombie: exited, not yet reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def restart_etcd():
    """Stop the lab's etcd and start it again as it was (same command line, data directory and
    log), as an operator restarting it would; its new pid goes where kwokctl looks for it.
    Returns once the API server is ready again."""
    with open(component_pidfile("etcd")) as f:
        pid = int(f.read())
    argv = open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\0").split(b"\0")
    cwd = os.readlink(f"/proc/{pid}/cwd")
    os.kill(pid, signal.SIGTERM)
    eventually(f"etcd pid {pid} to exit", lambda: exited(pid))
    log = open(os.path.expanduser(f"~/.kwok/clusters/{LAB}/logs/etcd.log"), "ab")
    started = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=log, start_new_session=True)
    with open(component_pidfile("etcd"), "w") as f:
        f.write(str(started.pid))
    eventually("the API server ready after the etcd restart", api_ready, timeout=60)


def lab_up():
    """`make lab-up`: the lab cluster running again, whatever of it stopped."""
    result = run(["lab/lab.sh", "up", LAB], timeout_s=300)
    assert result.returncode == 0, result.stderr
