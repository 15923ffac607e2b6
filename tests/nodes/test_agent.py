"""The node agent (``python -m gpuop.agent``) on simulated nodes with real kubelets registered in
the lab cluster, as the repair's tests make them: one agent per node, on this machine, entering
the node's namespaces as its host-PID Pod enters the host's (``--enter``), every 2 s. A healthy
node's condition is False; the seed's drop-in written after containerd's start is True, with the
gaps the fleet audit gives over SSH, an Event and the metrics; the repair turns it False; a
runtime whose socket is gone is Unknown, named, never False."""

import contextlib
import json
import os
import re
import subprocess
import sys
import urllib.request

import pytest
import tomli_w

from gpuop.judgment.condition import CONDITION
from gpuop.judgment.containerd import nvidia_dropin
from lab import labcluster
from tests.helpers import layouts, simnodes
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import deploy
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port
from tests.nodes.test_node_repair import ENDPOINT, RESTART, registered

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

INTERVAL_S = 2
COMMON = {"kubelet": ENDPOINT, "registered": True, "supervised": True, "nvidia_runtime": True, "knobs": RESTART}
NODES = [Node("agent-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], **COMMON),
         Node("agent-incident", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))], **COMMON)]


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """The nodes registered, each with its agent running; yields (nodes file, {node: metrics port}, root)."""
    root = str(tmp_path_factory.mktemp("agent"))
    with registered(NODES, root) as path, contextlib.ExitStack() as stack:
        ports = {}
        for n in NODES:
            ports[n.name] = free_port()
            log = stack.enter_context(open(os.path.join(root, f"agent-{n.name}.log"), "w"))
            agent = subprocess.Popen(
                [sys.executable, "-m", "gpuop.agent", "--node", n.name, "--interval-s", str(INTERVAL_S),
                 "--port", str(ports[n.name]), "--enter", f"nsenter -t {simnodes.ns_pid(n)} -m -u -p --",
                 "--kubeconfig", os.environ["KUBECONFIG"]], stdout=log, stderr=subprocess.STDOUT)
            stack.callback(agent.wait, 30)
            stack.callback(agent.terminate)
        try:
            yield path, ports, root
        finally:
            kubectl("delete", "events", "-n", "default", "--field-selector", "source=gpuop-agent", "--ignore-not-found")


def condition(node: str) -> dict:
    return next((c for c in get(f"node/{node}")["status"].get("conditions") or [] if c["type"] == CONDITION), {})


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def agent_events(node: str) -> list:
    found = get("events", "default", fieldSelector=f"involvedObject.name={node},source=gpuop-agent")["items"]
    return [e["reason"] for e in sorted(found, key=lambda e: e["metadata"]["creationTimestamp"])]


def test_a_healthy_node_is_false_and_the_incident_true_with_the_ssh_audit_s_gaps(agents):
    path, ports, root = agents
    healthy = eventually("agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False"
                         and condition("agent-healthy"), timeout=60)
    assert (healthy["reason"], healthy["message"]) == (
        "NoGap", "the runtime loads what is written, and a restart would load it too")
    incident = eventually("agent-incident's condition True", lambda: condition("agent-incident").get("status") == "True"
                          and condition("agent-incident"), timeout=60)
    assert incident["reason"] == "RestartTakesCriDown", incident
    report = os.path.join(root, "audit.json")
    run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
    with open(report) as f:
        over_ssh = sorted(g["kind"] for g in json.load(f)["nodes"]["agent-incident"]["gaps"])
    assert over_ssh and sorted(re.findall(r"\[([a-z-]+)\] ", incident["message"])) == over_ssh, (incident, run.log[-2000:])
    assert agent_events("agent-incident") == ["RestartTakesCriDown"]
    assert agent_events("agent-healthy") == ["NoGap"]
    said = metrics(ports["agent-incident"])
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="written"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="loaded"}' not in said
    assert 'gpuop_agent_condition{status="True"} 1.0' in said
    assert 'gpuop_agent_condition{status="False"} 1.0' in metrics(ports["agent-healthy"])


def test_the_fleet_audit_from_the_agents_alone_says_the_ssh_audit_s_gaps_and_names_a_node_with_none(agents):
    """``--data reach=agent``: one list of the cluster's Nodes, no node contacted; each node's gaps
    as its agent's condition says them, the same kinds as over SSH; a GPU node no agent judges is
    named, not judged."""
    path, ports, root = agents
    eventually("agent-incident's condition True", lambda: condition("agent-incident").get("status") == "True", timeout=60)
    eventually("agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60)
    missing = labcluster.kwok_node("agent-missing", capacity={"nvidia.com/gpu": "8"})
    kubectl("apply", "-f", "-", stdin=json.dumps(missing))
    try:
        ssh_report, agents_report = os.path.join(root, "ssh.json"), os.path.join(root, "agents.json")
        deploy(None, f"report={ssh_report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
        run = deploy(None, f"report={agents_report}", "reach=agent", env={"GPUOP_NODES": path}, inventory="nodes.py",
                     script="audit.py")
    finally:
        kubectl("delete", "node", "agent-missing", "--ignore-not-found")
    assert run.code != 0, run.log[-3000:]
    assert "[ssh-agent-" not in run.log  # no node contacted
    with open(ssh_report) as f, open(agents_report) as g:
        over_ssh, said = json.load(f)["nodes"], json.load(g)
    for name in ("agent-healthy", "agent-incident"):
        assert said["nodes"][name]["agent"] == "ok"
        assert sorted(gap["kind"] for gap in said["nodes"][name]["gaps"]) == sorted(gap["kind"] for gap in over_ssh[name]["gaps"])
    assert said["nodes"]["agent-incident"]["status"] == "True" and said["nodes"]["agent-healthy"]["status"] == "False"
    assert "agent-missing (agent missing)" in said["unread"]
    assert re.search(r"--> the fleet as its agents say it \(one list of \d+ Nodes\):", run.log), run.log[-3000:]
    assert "not judged, no live agent: " in run.log and "agent-missing (agent missing)" in run.log


def test_the_repair_turns_it_false_its_transition_moved_once_more(agents):
    path, ports, root = agents
    true = eventually("agent-incident's condition True", lambda: condition("agent-incident").get("status") == "True"
                      and condition("agent-incident"), timeout=60)
    run = deploy(None, env={"GPUOP_NODES": path}, inventory="nodes.py", script="fix.py")
    assert run.code == 0, run.log[-3000:]
    false = eventually("agent-incident's condition False", lambda: condition("agent-incident").get("status") == "False"
                       and condition("agent-incident"), timeout=3 * INTERVAL_S + 30)
    assert false["lastTransitionTime"] != true["lastTransitionTime"]
    assert agent_events("agent-incident")[0] == "RestartTakesCriDown" and agent_events("agent-incident")[-1] == "NoGap"
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 0.0' in metrics(ports["agent-incident"])


def test_a_runtime_whose_socket_is_gone_is_unknown_never_false(agents):
    path, ports, root = agents
    node = next(n for n in NODES if n.name == "agent-healthy")
    socket = f"/proc/{simnodes.ns_pid(node)}/root{ENDPOINT.removeprefix('unix://')}"
    kept = socket + ".away"
    os.rename(socket, kept)
    try:
        seen = eventually("agent-healthy's condition Unknown", lambda: condition("agent-healthy").get("status") == "Unknown"
                          and condition("agent-healthy"), timeout=60)
        assert seen["reason"] == "RuntimeNotAnswering", seen
        assert seen["message"].startswith("the runtime's own answer was not had (loaded from "), seen
    finally:
        os.rename(kept, socket)
    eventually("agent-healthy's condition False again", lambda: condition("agent-healthy").get("status") == "False",
               timeout=60)
