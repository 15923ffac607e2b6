"""Helpers for tests against the real lab cluster: the kubernetes client and kubectl."""

import json
import subprocess
import time

from kubernetes import client, config

LAB_NODES = ("lab-node-0", "lab-node-1", "lab-node-2")
GPU = "nvidia.com/gpu"


def core(context=None) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(context=context))


def apps(context=None) -> client.AppsV1Api:
    return client.AppsV1Api(config.new_client_from_config(context=context))


def kubectl(*args, context=None, check=True, stdin=None) -> str:
    pinned = ["--context", context] if context else []
    result = subprocess.run(["kubectl", *pinned, *args], input=stdin, capture_output=True,
                            text=True)
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
    kubectl("delete", "namespace", *namespaces, "--ignore-not-found", "--wait=true", context=context)
    kubectl("delete", "runtimeclass", "nvidia", "--ignore-not-found", context=context)
    for node in LAB_NODES:
        set_gpus(node, None, context)
