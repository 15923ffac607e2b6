"""The fleet repair run on simulated nodes, and what the tests read of those nodes."""

import contextlib
import json
import os

from tests.helpers import nodesfiles, simnodes
from tests.helpers.fleetobjects import MARK, NAMESPACE, fleet_basics
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.kubelets import READ_IMAGE

ENDPOINT = "unix:///run/containerd/containerd.sock"


RESTART = {"containerd_restart": "pkill -x containerd"}  # its supervisor starts it again, as systemd would


def deployment(app: str, node: str, runtime_class: str = "", volumes: tuple = ()) -> dict:
    """A Deployment of one Pod ``app`` pinned to ``node`` (past the fleet's taint), sleeping."""
    labels = {"app": app}
    mounts = [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in volumes]
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": MARK, "operator": "Exists"}],
        **({"runtimeClassName": runtime_class} if runtime_class else {}),
        **({"volumes": list(volumes)} if volumes else {}),
        "containers": [
            {
                "name": "work",
                "image": READ_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "sleep 3600"],
                **({"volumeMounts": mounts} if mounts else {}),
            }
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def workloads(nodes) -> str:
    """RuntimeClass fleet-nvidia, a Deployment of one GPU Pod pinned to each node, and one that
    runs now (no RuntimeClass) on fix-ctk, which a budget can hold."""
    docs = [
        *fleet_basics(),
        deployment("steady-fix-ctk", "fix-ctk"),
    ]
    docs += [deployment(f"work-{n.name}", n.name, "fleet-nvidia") for n in nodes]
    return "\n---\n".join(json.dumps(d) for d in docs)


def ready(name) -> bool:
    node = get(f"node/{name}")
    return bool(node) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or []
    )


def work_pods(node) -> list:
    return get("pods", NAMESPACE, labelSelector=f"app=work-{node}")["items"]


def running(app) -> bool:
    """Whether Deployment ``app``'s Pod runs (on the node it is pinned to)."""
    return any(
        p["status"].get("phase") == "Running" for p in get("pods", NAMESPACE, labelSelector=f"app={app}")["items"]
    )


@contextlib.contextmanager
def registered(nodes, root, awaited=()):
    """``nodes`` started under ``root``, each registered Ready by its kubelet, with workloads()
    applied (``awaited``: the Deployments whose Pod must run first); yields their nodes file."""
    with simnodes.running(nodes, root) as key:
        for n in nodes:
            eventually(f"node {n.name}'s kubelet to register it Ready", lambda: ready(n.name), timeout=120)
        kubectl("apply", "-f", "-", stdin=workloads(nodes))
        for app in awaited:
            eventually(f"{app}'s Pod running", lambda: running(app), timeout=120)
        try:
            yield nodesfiles.nodes_file(nodes, key, os.path.join(root, "nodes.yaml"), {n.name: n.name for n in nodes})
        finally:
            kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


def backups(node) -> list:
    """Every file the fleet repair kept on ``node`` (under /var/lib/gpuop/backup), as the node names it."""
    root = f"/proc/{simnodes.ns_pid(node)}/root"
    return sorted(
        os.path.join(top, f)[len(root) :] for top, _, files in os.walk(f"{root}/var/lib/gpuop/backup") for f in files
    )
