"""The simulated fleet's objects in the lab cluster: its Nodes (labelled and tainted as the
fleet's, GPUs advertised), RuntimeClasses, a GPU Pod bound to each node and a toolkit DaemonSet."""

import json

from lab import labcluster
from tests.helpers.kube import kubectl

NAMESPACE = "gpuop-fleet"


MARK = "gpuop-fleet"  # label and taint of the fleet's Nodes: the lab's own Pods stay off them


def fleet_basics() -> list:
    """The fleet's namespace and its GPU RuntimeClass, fleet-nvidia (handler nvidia)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "fleet-nvidia"},
            "handler": "nvidia",
        },
    ]


def cluster_objects(nodes, gpus: int = 4) -> str:
    """The fleet's objects: its Nodes (GPUs advertised), RuntimeClasses (one whose handler no
    node loads), a GPU Pod bound to each node, and a toolkit DaemonSet on every fleet node."""
    toleration = [{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}]
    docs = [
        *fleet_basics(),
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "fleet-kata"}, "handler": "kata"},
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": "fleet-aks"},
            "handler": "nvidia-container-runtime",
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "fleet-container-toolkit", "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"app": "fleet-toolkit"}},
                "template": {
                    "metadata": {"labels": {"app": "fleet-toolkit"}},
                    "spec": {
                        "nodeSelector": {MARK: "true"},
                        "tolerations": toleration,
                        "containers": [{"name": "toolkit", "image": "toolkit:v1.17.0"}],
                    },
                },
            },
        },
    ]
    for n in nodes:
        if not n.registered:  # a registered node's Node is its kubelet's
            node = labcluster.kwok_node(n.name, labels={MARK: "true"}, capacity={"nvidia.com/gpu": str(gpus)})
            docs.append({**node, "spec": {"taints": [{"key": MARK, "value": "true", "effect": "NoSchedule"}]}})
        gpu = {"name": "cuda", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"gpu-{n.name}", "namespace": NAMESPACE},
                "spec": {
                    "nodeName": n.name,
                    "runtimeClassName": "fleet-nvidia",
                    "tolerations": toleration,
                    "containers": [gpu],
                },
            }
        )
        if n.cdi_pod:
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"cdi-{n.name}", "namespace": NAMESPACE},
                    "spec": {"nodeName": n.name, "tolerations": toleration, "containers": [gpu]},
                }
            )
        if n.aks_pod:
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"aks-{n.name}", "namespace": NAMESPACE},
                    "spec": {
                        "nodeName": n.name,
                        "runtimeClassName": "fleet-aks",
                        "tolerations": toleration,
                        "containers": [gpu],
                    },
                }
            )
    return "\n---\n".join(json.dumps(d) for d in docs)


def create_cluster_objects(nodes, gpus: int = 4):
    kubectl("apply", "-f", "-", stdin=cluster_objects(nodes, gpus))
    have = {**labcluster.CAPACITY, "nvidia.com/gpu": str(gpus)}
    for n in nodes:  # reached on loopback, as a node at its InternalIP (its own sshd's port)
        status = {
            "capacity": have,
            "allocatable": have,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": n.name}],
        }
        if n.registered:  # its kubelet says the rest: GPUs advertised as a device plugin would
            status = {k: {"nvidia.com/gpu": str(gpus)} for k in ("capacity", "allocatable")}
        kubectl("patch", "node", n.name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
        if n.api_handlers:
            handlers = [{"name": h, "features": {"recursiveReadOnlyMounts": True}} for h in n.api_handlers]
            kubectl(
                "patch",
                "node",
                n.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": {"runtimeHandlers": handlers}}),
            )


def create_settled(nodes):
    """The fleet's objects, once its toolkit DaemonSet is rolled out and every Pod is Ready (kwok
    marks them Ready on its Nodes): what the audit then judges."""
    create_cluster_objects(nodes)
    kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/fleet-container-toolkit", "--timeout=120s")
    kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", "pod", "--all", "--timeout=120s")


def delete_cluster_objects(nodes):
    # Pods at once, without grace: a registered node's kubelet may be gone, and would never confirm.
    kubectl("delete", "daemonset,pod", "--all", "-n", NAMESPACE, "--grace-period=0", "--force", "--ignore-not-found")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
    kubectl("delete", "runtimeclass", "fleet-nvidia", "fleet-kata", "fleet-aks", "--ignore-not-found")
    if nodes:
        kubectl("delete", "node", *[n.name for n in nodes], "--ignore-not-found")
