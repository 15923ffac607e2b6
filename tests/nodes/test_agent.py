"""The node agent (``python -m gpuop.agent``) on simulated nodes with real kubelets registered in
the lab cluster, as the repair's tests make them: one agent per node, on this machine, entering
the node's namespaces as its host-PID Pod enters the host's (``--enter``), every 2 s. A healthy
node's condition is False; the seed's drop-in written after containerd's start is True, with the
gaps the fleet audit gives over SSH, an Event and the metrics; the repair turns it False; a
runtime whose socket is gone is Unknown, named, never False."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import tomli_w

from gpuop.judgment.condition import CONDITION
from gpuop.judgment.containerd import nvidia_dropin
from lab import labcluster
from tests.helpers import layouts, simnodes
from tests.helpers.kube import component_pidfile, control_plane_faults, eventually, get, heal_lab, kubectl
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import deploy
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port
from tests.nodes.test_node_repair import ENDPOINT, RESTART, registered

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

INTERVAL_S = 2
COMMON = {"kubelet": ENDPOINT, "registered": True, "supervised": True, "nvidia_runtime": True, "knobs": RESTART}
NODES = [
    Node("agent-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], **COMMON),
    Node("agent-incident", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))], **COMMON),
    # nvidia-ctk 1.19+'s version-4 drop-in beside a 2.3 root: the running daemon holds nvidia, its restart refuses
    Node("agent-v4", "2.3.3", after=[write_file(DROPIN, tomli_w.dumps({"version": 4, **nvidia_dropin()}))], **COMMON),
]


class Agents:
    """One agent process per node, on this machine, each entering its node's namespaces."""

    def __init__(self, root: str):
        self.root, self.ports, self.running = root, {}, {}

    def start(self, node: Node):
        self.ports.setdefault(node.name, free_port())
        with open(os.path.join(self.root, f"agent-{node.name}.log"), "a") as log:
            self.running[node.name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpuop.agent",
                    "--node",
                    node.name,
                    "--interval-s",
                    str(INTERVAL_S),
                    "--port",
                    str(self.ports[node.name]),
                    "--enter",
                    f"nsenter -t {simnodes.ns_pid(node)} -m -u -p --",
                    "--kubeconfig",
                    os.environ["KUBECONFIG"],
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop(self, name: str):
        agent = self.running.pop(name)
        agent.terminate()
        agent.wait(30)


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """The nodes registered, each with its agent running; yields (nodes file, Agents, root)."""
    root = str(tmp_path_factory.mktemp("agent"))
    with registered(NODES, root) as path:
        running = Agents(root)
        try:
            for n in NODES:
                running.start(n)
            yield path, running, root
        finally:
            for name in list(running.running):
                running.stop(name)
            kubectl("delete", "events", "-n", "default", "--field-selector", "source=gpuop-agent", "--ignore-not-found")


def condition(node: str) -> dict:
    return next((c for c in get(f"node/{node}")["status"].get("conditions") or [] if c["type"] == CONDITION), {})


def true_as_over_ssh(node: str, reason: str, path: str, root: str) -> dict:
    """``node``'s condition once True: its ``reason``, and in its message exactly the gap kinds
    the fleet audit gives over SSH on the same node (nodes file ``path``)."""
    seen = eventually(
        f"{node}'s condition True", lambda: condition(node).get("status") == "True" and condition(node), timeout=60
    )
    assert seen["reason"] == reason, seen
    report = os.path.join(root, f"audit-{node}.json")
    run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
    with open(report) as f:
        over_ssh = sorted(g["kind"] for g in json.load(f)["nodes"][node]["gaps"])
    assert over_ssh and sorted(re.findall(r"\[([a-z-]+)\] ", seen["message"])) == over_ssh, (seen, run.log[-2000:])
    return seen


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def agent_events(node: str) -> list:
    found = get("events", "default", fieldSelector=f"involvedObject.name={node},source=gpuop-agent")["items"]
    return [e["reason"] for e in sorted(found, key=lambda e: e["metadata"]["creationTimestamp"])]


def test_a_healthy_node_is_false_and_the_incident_true_with_the_ssh_audit_s_gaps(agents):
    path, running, root = agents
    ports = running.ports
    healthy = eventually(
        "agent-healthy's condition False",
        lambda: condition("agent-healthy").get("status") == "False" and condition("agent-healthy"),
        timeout=60,
    )
    assert (healthy["reason"], healthy["message"]) == (
        "NoGap",
        "the runtime loads what is written, and a restart would load it too",
    )
    true_as_over_ssh("agent-incident", "RestartTakesCriDown", path, root)
    assert agent_events("agent-incident") == ["RestartTakesCriDown"]
    assert agent_events("agent-healthy") == ["NoGap"]
    said = metrics(ports["agent-incident"])
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="written"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="loaded"}' not in said
    assert 'gpuop_agent_condition{status="True"} 1.0' in said
    assert 'gpuop_agent_condition{status="False"} 1.0' in metrics(ports["agent-healthy"])


def test_a_runtime_its_next_start_refuses_is_true(agents):
    """A version-4 drop-in beside containerd 2.3.3's version-2 root: the running daemon is fine, its
    next start is not: True, in the binary's own words (before the repair, which fixes it)."""
    seen = eventually(
        "agent-v4's condition True",
        lambda: condition("agent-v4").get("status") == "True" and condition("agent-v4"),
        timeout=60,
    )
    assert seen["reason"] == "RestartRefusesStart", seen
    assert "drop-in config version 4 higher than root config version 2" in seen["message"], seen


def test_the_fleet_audit_from_the_agents_alone_says_the_ssh_audit_s_gaps_and_names_a_node_with_none(agents):
    """``--data reach=agent``: one list of the cluster's Nodes, no node contacted; each node's gaps
    as its agent's condition says them, the same kinds as over SSH; a GPU node no agent judges is
    named, not judged."""
    path, running, root = agents
    eventually(
        "agent-incident's condition True", lambda: condition("agent-incident").get("status") == "True", timeout=60
    )
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    missing = labcluster.kwok_node("agent-missing", capacity={"nvidia.com/gpu": "8"})
    kubectl("apply", "-f", "-", stdin=json.dumps(missing))
    try:
        ssh_report, agents_report = os.path.join(root, "ssh.json"), os.path.join(root, "agents.json")
        deploy(None, f"report={ssh_report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
        run = deploy(
            None,
            f"report={agents_report}",
            "reach=agent",
            env={"GPUOP_NODES": path},
            inventory="nodes.py",
            script="audit.py",
        )
    finally:
        kubectl("delete", "node", "agent-missing", "--ignore-not-found")
    assert run.code != 0, run.log[-3000:]
    assert "[ssh-agent-" not in run.log  # no node contacted
    with open(ssh_report) as f, open(agents_report) as g:
        over_ssh, said = json.load(f)["nodes"], json.load(g)
    for name in ("agent-healthy", "agent-incident"):
        assert said["nodes"][name]["agent"] == "ok"
        assert sorted(gap["kind"] for gap in said["nodes"][name]["gaps"]) == sorted(
            gap["kind"] for gap in over_ssh[name]["gaps"]
        )
    assert said["nodes"]["agent-incident"]["status"] == "True" and said["nodes"]["agent-healthy"]["status"] == "False"
    assert "agent-missing (agent missing)" in said["unread"]
    assert re.search(r"--> the fleet as its agents say it \(one list of \d+ Nodes\):", run.log), run.log[-3000:]
    assert "not judged, no live agent: " in run.log and "agent-missing (agent missing)" in run.log


def test_the_repair_turns_it_false_its_transition_moved_once_more(agents):
    """``pyinfra nodes.py fix.py --data nodes_from=agents``: the nodes whose agent says a gap are
    repaired, the healthy one not touched; the incident's condition False again."""
    path, running, root = agents
    ports = running.ports
    true = eventually(
        "agent-incident's condition True",
        lambda: condition("agent-incident").get("status") == "True" and condition("agent-incident"),
        timeout=60,
    )
    # the nodes taken from their agents: those whose condition says a gap, the healthy one left alone
    run = deploy(None, "nodes_from=agents", env={"GPUOP_NODES": path}, inventory="nodes.py", script="fix.py")
    assert run.code == 0, run.log[-3000:]
    taken = re.search(r"--> the nodes their agents say a gap of \(.*\): (.*)\n", run.log)
    assert taken and taken.group(1) == "ssh-agent-incident, ssh-agent-v4", run.log[:3000]
    assert "not taken: ssh-agent-healthy: its agent says False (NoGap)" in run.log
    assert "[ssh-agent-healthy]" not in run.log, run.log[-3000:]  # not a host of the run
    false = eventually(
        "agent-incident's condition False",
        lambda: condition("agent-incident").get("status") == "False" and condition("agent-incident"),
        timeout=3 * INTERVAL_S + 30,
    )
    assert false["lastTransitionTime"] != true["lastTransitionTime"]
    assert agent_events("agent-incident")[0] == "RestartTakesCriDown" and agent_events("agent-incident")[-1] == "NoGap"
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 0.0' in metrics(ports["agent-incident"])


def test_a_runtime_whose_socket_is_gone_is_unknown_never_false(agents):
    path, running, root = agents
    node = next(n for n in NODES if n.name == "agent-healthy")
    socket = f"/proc/{simnodes.ns_pid(node)}/root{ENDPOINT.removeprefix('unix://')}"
    kept = socket + ".away"
    os.rename(socket, kept)
    try:
        seen = eventually(
            "agent-healthy's condition Unknown",
            lambda: condition("agent-healthy").get("status") == "Unknown" and condition("agent-healthy"),
            timeout=60,
        )
        assert seen["reason"] == "RuntimeNotAnswering", seen
        assert seen["message"].startswith("the runtime's own answer was not had (loaded from "), seen
    finally:
        os.rename(kept, socket)
    eventually(
        "agent-healthy's condition False again", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )


def judgments(port: int) -> float:
    return float(re.search(r"^gpuop_agent_judgments_total (\S+)$", metrics(port), re.M).group(1))


def test_an_agent_restarted_keeps_the_condition_s_transition_and_says_nothing_new(agents):
    """The agent's Pod deleted and back (here: its process): the condition it finds is the one it
    would write, so neither its lastTransitionTime nor the Node's Events move."""
    path, running, root = agents
    before = eventually(
        "agent-healthy's condition False",
        lambda: condition("agent-healthy").get("status") == "False" and condition("agent-healthy"),
        timeout=60,
    )
    said = agent_events("agent-healthy")
    running.stop("agent-healthy")
    running.start(next(n for n in NODES if n.name == "agent-healthy"))
    eventually(
        "the restarted agent's second judgment",
        lambda: _answers(running.ports["agent-healthy"]) and judgments(running.ports["agent-healthy"]) >= 2,
        timeout=60,
    )
    after = condition("agent-healthy")
    assert (after["status"], after["lastTransitionTime"]) == ("False", before["lastTransitionTime"])
    assert agent_events("agent-healthy") == said


def test_a_runtimeclass_deleted_and_made_again_reaches_the_judgment_through_the_watch(agents):
    """The RuntimeClasses are listed once, then watched (no cluster-wide read each judgment): the
    class of agent-healthy's GPU Pod deleted, its sandbox cannot start (True); made again, False."""
    nvidia = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "fleet-nvidia"},
        "handler": "nvidia",
    }
    assert get("runtimeclass/fleet-nvidia")["handler"] == "nvidia"
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    kubectl("delete", "runtimeclass", "fleet-nvidia")
    try:
        gone = eventually(
            "agent-healthy's condition True",
            lambda: condition("agent-healthy").get("status") == "True" and condition("agent-healthy"),
            timeout=60,
        )
        assert (
            "[sandbox-fails] Pod " in gone["message"]
            and "(RuntimeClass fleet-nvidia, handler fleet-nvidia)" in gone["message"]
        )
    finally:
        kubectl("apply", "-f", "-", stdin=json.dumps(nvidia))
    eventually(
        "agent-healthy's condition False again", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )


def _answers(port: int) -> bool:
    try:
        metrics(port)
        return True
    except OSError:
        return False


def test_an_api_server_stalled_for_30_s_is_waited_out(agents):
    """The API server stopped (SIGSTOP) for 30 s: the agent lives on, counts the judgments it could
    not make, and judges again once the API server answers."""
    path, running, root = agents
    port = running.ports["agent-incident"]
    with open(component_pidfile("kube-apiserver")) as f:
        apiserver = int(f.read())
    os.kill(apiserver, signal.SIGSTOP)
    try:
        time.sleep(30)  # the stall itself is the test's condition: nothing to poll while the API server is stopped
    finally:
        os.kill(apiserver, signal.SIGCONT)
        if control_plane_faults():  # a controller that lost its lease meanwhile exits: the Nodes kept, it starts again
            heal_lab()
    resumed = time.time()
    assert running.running["agent-incident"].poll() is None  # alive
    assert re.search(r'^gpuop_agent_read_failures_total\{what="cluster"\} [1-9]', metrics(port), re.M), metrics(port)
    eventually(
        "a judgment after the API server came back",
        lambda: (
            float(re.search(r"^gpuop_agent_last_judgment_timestamp_seconds (\S+)$", metrics(port), re.M).group(1))
            > resumed
        ),
        timeout=60,
    )
