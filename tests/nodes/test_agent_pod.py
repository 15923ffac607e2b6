"""The node agent as its users deploy it (issue 49): ``kubectl apply -k`` of a lab overlay of
deploy/agent, its DaemonSet's Pod running the image the lab builds with no pull
(``lab/build.sh agent-image``: Debian's Python, nsenter, the project's wheel and its pinned
dependencies), on a simulated node whose real kubelet registered it in the lab cluster, entering
the node's namespaces from its host-PID Pod. The seed's drop-in written after containerd's start
is True within 2 intervals, in the gaps the SSH audit gives; an Event; the metrics from the Pod;
the Pod deleted and back keeps the transition.

The overlay changes only what the lab is not: the API server is reached on this machine's
loopback (host network; no Service proxy here), the interval is 2 s, the metrics' port a free one,
and crictl the lab's."""

import json
import os
import urllib.parse

import pytest
import tomli_w

from gpuop.judgment.containerd import nvidia_dropin
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.labcontainerd import crictl
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.proc import run
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port
from tests.nodes.test_agent import (
    COMMON,
    INTERVAL_S,
    _answers,
    agent_events,
    condition,
    judgments,
    metrics,
    true_as_over_ssh,
)
from tests.nodes.test_node_repair import registered

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMESPACE = "gpuop-system"
GPU_LABEL = "nvidia.com/gpu.present"  # the DaemonSet's nodeSelector


def image() -> str:
    """The agent's image, built by the lab with no pull (the same bytes for the same inputs)."""
    return run([os.path.join(ROOT, "lab/build.sh"), "agent-image"], timeout_s=900, check=True).stdout.strip()


def overlay(where: str, port: int) -> str:
    """A kustomization of deploy/agent for the lab: the API server on loopback, a short interval."""
    server = urllib.parse.urlparse(
        json.loads(kubectl("config", "view", "--minify", "-o", "json"))["clusters"][0]["cluster"]["server"]
    )
    container = "/spec/template/spec/containers/0"
    patch = [
        {
            "op": "replace",
            "path": f"{container}/args",
            "value": [
                "--enter",
                "nsenter -t 1 -m -u -i -p --",
                "--interval-s",
                str(INTERVAL_S),
                "--port",
                str(port),
                "--crictl",
                crictl(),
            ],
        },
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {
            "op": "add",
            "path": f"{container}/env/-",
            "value": {"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
        },
        {
            "op": "add",
            "path": f"{container}/env/-",
            "value": {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)},
        },
    ]
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "kustomization.yaml"), "w") as f:
        json.dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(os.path.join(ROOT, "deploy/agent"), where)],
                "patches": [{"target": {"kind": "DaemonSet", "name": "gpuop-agent"}, "patch": json.dumps(patch)}],
            },
            f,
        )
    return where


def agent_pod() -> dict:
    pods = get("pods", NAMESPACE, labelSelector="app.kubernetes.io/name=gpuop-agent")["items"]
    return next(
        (p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")), {}
    )


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The incident's node, the agent's image imported into its containerd, and the agent applied."""
    root = str(tmp_path_factory.mktemp("agent-pod"))
    archive = image()
    ctr = "ctr --address /run/containerd/containerd.sock --namespace k8s.io --timeout 120s"
    load = f"{ctr} images import {archive} >/dev/null"
    node = Node("agent-pod", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin())), load], **COMMON)
    port = free_port()
    with registered([node], root) as path:
        kubectl("label", "node", node.name, f"{GPU_LABEL}=true")
        kustomization = overlay(os.path.join(root, "overlay"), port)
        kubectl("apply", "-k", kustomization)
        try:
            yield path, root, port
        finally:
            # waited for while the node still runs its kubelet (it ends the Pod): the next
            # module's apply finds no Namespace being deleted
            kubectl("delete", "-k", kustomization, "--ignore-not-found", "--timeout=120s")
            kubectl("delete", "events", "-n", "default", "--field-selector", "source=gpuop-agent", "--ignore-not-found")


def test_the_daemonset_s_pod_says_the_incident_with_the_ssh_audit_s_gaps(deployed):
    path, root, port = deployed
    pod = eventually("the agent's Pod running on agent-pod", agent_pod, timeout=120)
    assert pod["spec"]["nodeName"] == "agent-pod"
    assert pod["status"]["containerStatuses"][0]["image"].endswith("gpuop-agent:0.1.0")
    true_as_over_ssh("agent-pod", "RestartTakesCriDown", path, root)
    assert agent_events("agent-pod") == ["RestartTakesCriDown"]
    said = metrics(port)
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 1.0' in said
    assert 'gpuop_agent_condition{status="True"} 1.0' in said


def test_the_pod_deleted_and_back_keeps_the_condition_s_transition(deployed):
    _, _, port = deployed
    before = eventually(
        "agent-pod's condition True",
        lambda: condition("agent-pod").get("status") == "True" and condition("agent-pod"),
        timeout=60,
    )
    first = agent_pod()["metadata"]["uid"]
    kubectl("delete", "pod", "-n", NAMESPACE, agent_pod()["metadata"]["name"], "--wait=false")
    back = eventually(
        "the DaemonSet's new Pod running",
        lambda: (agent_pod().get("metadata") or {}).get("uid") not in (None, first) and agent_pod(),
        timeout=120,
    )
    assert back["spec"]["nodeName"] == "agent-pod"
    eventually("the new Pod's second judgment", lambda: _answers(port) and judgments(port) >= 2, timeout=60)
    after = condition("agent-pod")
    assert (after["status"], after["lastTransitionTime"]) == ("True", before["lastTransitionTime"])
    assert agent_events("agent-pod") == ["RestartTakesCriDown"]
