"""The node agent as its users deploy it (issues 49, 60): ``helm install`` of its chart
(deploy/helm/gpuop-agent, which renders deploy/agent's objects: tests/chart), its DaemonSet's Pod
running the image the lab builds with no pull (``lab/build.sh agent-image``: Debian's Python,
nsenter, the project's wheel and its pinned dependencies), on a simulated node whose real kubelet
registered it in the lab cluster, entering the node's namespaces from its host-PID Pod. The seed's
drop-in written after containerd's start is True within 2 intervals, in the gaps the SSH audit
gives; an Event; the metrics from the Pod; the Pod deleted and back keeps the transition; ``helm
uninstall`` leaves no gpuop condition or label.

The values change only what the lab is not: the API server is reached on this machine's
loopback (host network; no Service proxy here), the interval is 2 s, the metrics' port a free one
(the probes' with it), and crictl the lab's."""

import json
import os
import signal
import subprocess
import time
import urllib.parse

import pytest
import tomli_w

from gpuop.judgment.condition import CONDITIONS, GATE, RESTART_UNSAFE
from gpuop.judgment.configs import nvidia_dropin
from tests.helpers.agents import (
    COMMON,
    INTERVAL_S,
    _answers,
    agent_events,
    condition,
    gated,
    judgments,
    metrics,
    true_as_over_ssh,
)
from tests.helpers.charts import CHART, helm
from tests.helpers.kube import eventually, get, kubectl, request
from tests.helpers.labcontainerd import crictl
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.proc import run
from tests.helpers.repairs import registered
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMESPACE = "gpuop-system"
RELEASE = "gpuop-agent"
GPU_LABEL = "nvidia.com/gpu.present"  # the DaemonSet's nodeSelector


def image() -> str:
    """The agent's image, built by the lab with no pull (the same bytes for the same inputs)."""
    return run([os.path.join(ROOT, "lab/build.sh"), "agent-image"], timeout_s=900, check=True).stdout.strip()


def lab_values(port: int) -> list:
    """``helm install`` values for what the lab is not: the API server reached on this machine's
    loopback (host network; no Service proxy here), the interval 2 s, the metrics' port a free one
    (the probes' with it), and crictl the lab's."""
    server = urllib.parse.urlparse(
        json.loads(kubectl("config", "view", "--minify", "-o", "json"))["clusters"][0]["cluster"]["server"]
    )
    env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": server.hostname},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(server.port)},
    ]
    return [
        "--set",
        f"settings.intervalSeconds={INTERVAL_S}",
        "--set",
        f"settings.port={port}",
        "--set",
        "hostNetwork=true",
        "--set-json",
        f"extraEnv={json.dumps(env)}",
        "--set-json",
        f"settings.extraArgs={json.dumps([f'--crictl={crictl()}'])}",
    ]


def agent_pod() -> dict:
    pods = get("pods", NAMESPACE, labelSelector="app.kubernetes.io/name=gpuop-agent")["items"]
    return next(
        (p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")), {}
    )


def gpuop_marks() -> dict:
    """Every Node's gpuop conditions and gate label, by Node: what an uninstall must leave none of."""
    return {
        n["metadata"]["name"]: [c["type"] for c in n["status"].get("conditions") or [] if c["type"] in CONDITIONS]
        + ([GATE] if GATE in (n["metadata"].get("labels") or {}) else [])
        for n in get("nodes")["items"]
        if any(c["type"] in CONDITIONS for c in n["status"].get("conditions") or [])
        or GATE in (n["metadata"].get("labels") or {})
    }


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The incident's node, the agent's image imported into its containerd, and the agent's chart
    installed (``helm install``), timed to its first condition."""
    root = str(tmp_path_factory.mktemp("agent-pod"))
    archive = image()
    ctr = "ctr --address /run/containerd/containerd.sock --namespace k8s.io --timeout 120s"
    load = f"{ctr} images import {archive} >/dev/null"
    node = Node("agent-pod", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin())), load], **COMMON)
    port = free_port()
    with registered([node], root) as path:
        kubectl("label", "node", node.name, f"{GPU_LABEL}=true")
        began = time.monotonic()
        installed = helm("install", RELEASE, CHART, "--namespace", NAMESPACE, "--create-namespace", *lab_values(port))
        took = {"install_s": time.monotonic() - began}
        assert f"NAME: {RELEASE}" in installed.stdout and "kubectl get nodes -o custom-columns" in installed.stdout
        eventually("agent-pod's first condition", lambda: condition("agent-pod").get("status"), timeout=120)
        took["first_condition_s"] = time.monotonic() - began
        print(f"helm install in {took['install_s']:.1f}s, the first condition {took['first_condition_s']:.1f}s after")
        try:
            yield path, root, port
        finally:
            # waited for while the node still runs its kubelet (it ends the Pods): the next
            # module's install finds no Namespace being deleted
            helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout", "5m")
            kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
            kubectl("delete", "events", "-n", "default", "--field-selector", "source=gpuop-agent", "--ignore-not-found")


def test_the_daemonset_s_pod_says_the_incident_with_the_ssh_audit_s_gaps(deployed):
    path, root, port = deployed
    pod = eventually("the agent's Pod running on agent-pod", agent_pod, timeout=120)
    assert pod["spec"]["nodeName"] == "agent-pod"
    assert pod["status"]["containerStatuses"][0]["image"].endswith("gpuop-agent:0.1.0")
    problem, _ = true_as_over_ssh("agent-pod", ("SandboxFails", "RestartTakesCriDown"), path, root)
    assert sorted(agent_events("agent-pod")) == sorted([problem["reason"], "RestartTakesCriDown"])
    said = metrics(port)
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 1.0' in said
    assert 'gpuop_agent_condition{condition="GPURuntimeRestartUnsafe",status="True"} 1.0' in said


def kured_blockers(node: str) -> list:
    """The Pods that hold ``node``'s reboot as kured's pod blocker asks for them
    (``--blocking-pod-selector=gpuop.io/restart-unsafe=true``, kured's pkg/blockers): on that node
    by ``spec.nodeName``, of that label, not Succeeded, Failed or Unknown."""
    query = {"fieldSelector": f"spec.nodeName={node}", "labelSelector": f"{GATE}=true"}
    found = request("GET", "/api/v1/pods", query=query)  # every namespace, as kured asks
    return [
        p["metadata"]["name"]
        for p in found["items"]
        if p["status"].get("phase") not in ("Succeeded", "Failed", "Unknown")
    ]


def test_the_restart_gate_holds_kured_on_this_node_only_and_selects_it_for_upgrade_plans(deployed):
    """Its next start would take CRI down: the agent's own Pod and its Node carry the gate's label;
    kured's pod-blocker query finds the agent's Pod on this node and nothing on another; a Plan's
    nodeSelector (gpuop.io/restart-unsafe NotIn [true]) leaves this node out."""
    eventually("agent-pod's RestartUnsafe True", lambda: condition("agent-pod", RESTART_UNSAFE).get("status") == "True")
    pod = eventually(
        "the agent's Pod gated", lambda: (agent_pod()["metadata"].get("labels") or {}).get(GATE) and agent_pod()
    )
    assert eventually("kured's blockers on agent-pod", lambda: kured_blockers("agent-pod")) == [pod["metadata"]["name"]]
    assert kured_blockers("lab-node-1") == []
    eventually("agent-pod's Node gated", lambda: gated("agent-pod"))
    plan = get("nodes", None, labelSelector=f"{GATE} notin (true)")[
        "items"
    ]  # a Plan's nodeSelector, as the API server matches it
    names = {n["metadata"]["name"] for n in plan}
    assert "agent-pod" not in names and "lab-node-1" in names, names


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
    assert len(agent_events("agent-pod")) == 2  # one per condition, at their first change: none new
    eventually("the new Pod gated", lambda: (agent_pod()["metadata"].get("labels") or {}).get(GATE) == "true")


def test_an_agent_that_stops_answering_is_restarted_by_the_kubelet_through_its_liveness_probe(deployed):
    """The DaemonSet's own probe, unpatched: the agent's process frozen (SIGSTOP: its port still
    accepts, nothing answers), two probes time out and the kubelet restarts the container."""
    _, _, port = deployed
    pod = eventually("the agent's Pod ready", lambda: _ready(agent_pod()) and agent_pod(), timeout=120)
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    frozen = subprocess.run(["pgrep", "-f", "--", f"--port={port}"], capture_output=True, text=True, timeout=10)
    pids = [int(p) for p in frozen.stdout.split()]
    assert len(pids) == 1, f"one agent process with --port={port}, found {pids}"
    os.kill(pids[0], signal.SIGSTOP)
    # two periods of 30 s, the probe's 10 s grace a stopped process waits out, the container started again
    back = eventually(
        "the kubelet to restart the frozen agent",
        lambda: (
            (agent_pod().get("status") or {}).get("containerStatuses", [{}])[0].get("restartCount", 0) > restarts
            and agent_pod()
        ),
        timeout=240,
    )
    assert back["metadata"]["uid"] == pod["metadata"]["uid"]  # the same Pod: its container restarted
    eventually("the restarted agent's second judgment", lambda: _answers(port) and judgments(port) >= 2, timeout=60)
    assert condition("agent-pod")["status"] == "True"


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", []))


def test_a_rolling_update_runs_no_hook_and_keeps_the_conditions(deployed):
    """``helm upgrade`` with a changed value: the DaemonSet rolls its Pod, no hook runs (the forget
    is the uninstall's alone), and the new agent keeps both conditions and their transitions."""
    _, _, port = deployed
    before = {
        kind: eventually(f"agent-pod's {kind}", lambda kind=kind: condition("agent-pod", kind)) for kind in CONDITIONS
    }
    first = agent_pod()["metadata"]["uid"]
    upgraded = helm(
        "upgrade", RELEASE, CHART, "--namespace", NAMESPACE, "--reuse-values", "--set", "settings.heartbeatSeconds=240"
    )
    assert "STATUS: deployed" in upgraded.stdout, upgraded.stdout
    back = eventually(
        "the rolled Pod running",
        lambda: (agent_pod().get("metadata") or {}).get("uid") not in (None, first) and agent_pod(),
        timeout=120,
    )
    assert "--heartbeat-s=240" in back["spec"]["containers"][0]["args"]
    assert kubectl("get", "jobs", "-n", NAMESPACE, "-o", "name").split() == []
    eventually("the new agent's second judgment", lambda: _answers(port) and judgments(port) >= 2, timeout=60)
    for kind, was in before.items():
        now = condition("agent-pod", kind)
        assert (now["status"], now["lastTransitionTime"]) == (was["status"], was["lastTransitionTime"]), kind


def test_helm_uninstall_leaves_no_gpuop_condition_or_label_on_any_node(deployed):
    """Its pre-delete hook (``python -m gpuop.agent --forget`` in the agent's image, on the node the
    agent ran on) stops the agents, then takes gpuop's conditions and label off every Node."""
    eventually(
        "agent-pod's conditions and gate", lambda: set(gpuop_marks().get("agent-pod", [])) == {*CONDITIONS, GATE}
    )
    began = time.monotonic()
    gone = helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "5m")
    assert f'release "{RELEASE}" uninstalled' in gone.stdout, gone.stdout + gone.stderr
    print(f"helm uninstall in {time.monotonic() - began:.1f}s")
    assert gpuop_marks() == {}
    assert get("daemonsets", NAMESPACE)["items"] == []
    assert kubectl("get", "jobs", "-n", NAMESPACE, "-o", "name").split() == []  # the hook's, deleted once done
