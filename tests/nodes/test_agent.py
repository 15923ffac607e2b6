"""The node agent (``python -m gpuop.agent``) on simulated nodes with real kubelets registered in
the lab cluster, as the repair's tests make them: one agent per node, on this machine, entering
the node's namespaces as its host-PID Pod enters the host's (``--enter``), every 2 s. A healthy
node's condition is False; the seed's drop-in written after containerd's start is True, with the
gaps the fleet audit gives over SSH, an Event and the metrics; the repair turns it False; a
runtime whose socket is gone is Unknown, named, never False."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import tomli_w

from gpuop.agent.events import RESTORED
from gpuop.judgment.condition import CONDITIONS, GATE, PROBLEM, RESTART_UNSAFE, short
from gpuop.judgment.configs import nvidia_dropin
from lab import labcluster
from tests.helpers import drivers, layouts, simnodes
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
from tests.helpers.charts import alerts_on, kube_state_metrics, node_conditions
from tests.helpers.kube import (
    apiserver_series,
    component_pidfile,
    control_plane_faults,
    eventually,
    exited,
    get,
    heal_lab,
    kill_component,
    kubectl,
)
from tests.helpers.kubelets import READ_IMAGE
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import deploy
from tests.helpers.repairs import ENDPOINT, registered
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

NODES = [
    Node("agent-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], **COMMON),
    Node("agent-incident", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))], **COMMON),
    # the seed's incident on 2.4: the drop-in written after the start, a restart would load it (its
    # cgroup driver the node's own, cgroupfs, as the toolkit writes it: the repair's probe runs on it)
    Node(
        "agent-incident-24",
        "2.4.2",
        after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin(systemd=False)))],
        **COMMON,
    ),
    # nvidia-ctk 1.19+'s version-4 drop-in over the version-2 one a 2.3 root started with: the running
    # daemon holds nvidia (fine now), its restart refuses
    # a healthy runtime on a node whose driver's next boot is not: a newer kernel installed without
    # its headers, DKMS built nothing for it, a reboot pending (tests/helpers/drivers.py)
    Node(
        "agent-driver",
        "2.4.2",
        before=[layouts.nvidia_ctk_configure()],
        driver=lambda tree: (drivers.healthy(tree), drivers.kernel_without_module(tree)),
        **COMMON,
    ),
    Node(
        "agent-v4",
        "2.3.3",
        before=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))],
        after=[write_file(DROPIN, tomli_w.dumps({"version": 4, **nvidia_dropin()}))],
        **COMMON,
    ),
]


class Agents:
    """One agent process per node, on this machine, each entering its node's namespaces."""

    def __init__(self, root: str):
        self.root, self.ports, self.running = root, {}, {}

    def start(self, node: Node, interval_s: float = INTERVAL_S):
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
                    str(interval_s),
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


def last_events(node: str) -> dict:
    """The reason of the last Event the agent said for each of ``node``'s conditions (its message
    names the condition first: ``GPURuntimeProblem False: ...``)."""
    found = get("events", "default", fieldSelector=f"involvedObject.name={node},source=gpuop-agent")["items"]
    last = {}
    for e in sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"])):  # etcd's order of the last writes
        kind = next((k for k in CONDITIONS if e["message"].startswith(short(k) + " ")), None)
        if kind:
            last[kind] = e["reason"]
    return last


def test_a_healthy_node_is_false_and_the_incident_true_with_the_ssh_audit_s_gaps(agents):
    """The seed's lab node on 1.6.20 (the handler written after the start, its restart takes CRI
    down): both conditions True, the Node gated; a healthy node both False, not gated."""
    path, running, root = agents
    ports = running.ports
    for kind, words in (
        (PROBLEM, "the runtime loads what is written and gives the node's Pods what they ask"),
        (RESTART_UNSAFE, "a restart would start the runtime, its CRI up, with every handler and device path in use"),
    ):
        healthy = eventually(
            f"agent-healthy's {kind} False",
            lambda kind=kind: (
                condition("agent-healthy", kind).get("status") == "False" and condition("agent-healthy", kind)
            ),
            timeout=60,
        )
        assert (healthy["reason"], healthy["message"]) == ("NoGap", words)
    problem, _ = true_as_over_ssh("agent-incident", ("SandboxFails", "RestartTakesCriDown"), path, root)
    assert sorted(agent_events("agent-incident")) == sorted([problem["reason"], "RestartTakesCriDown"])
    assert agent_events("agent-healthy") == ["NoGap", "NoGap"]
    eventually("agent-incident's Node gated", lambda: gated("agent-incident"))
    assert not gated("agent-healthy")
    said = metrics(ports["agent-incident"])
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="written"} 1.0' in said
    assert 'gpuop_agent_handler{handler="nvidia",view="loaded"}' not in said
    assert 'gpuop_agent_condition{condition="GPURuntimeProblem",status="True"} 1.0' in said
    assert 'gpuop_agent_condition{condition="GPURuntimeRestartUnsafe",status="True"} 1.0' in said
    healthy_said = metrics(ports["agent-healthy"])
    assert 'gpuop_agent_condition{condition="GPURuntimeProblem",status="False"} 1.0' in healthy_said
    assert 'gpuop_agent_condition{condition="GPURuntimeRestartUnsafe",status="False"} 1.0' in healthy_said


def test_a_runtime_fine_now_its_next_start_refused_is_restart_unsafe_only_and_gated(agents):
    """A version-4 drop-in beside containerd 2.3.3's version-2 root: the running daemon is fine, its
    next start is not: Problem False, RestartUnsafe True in the binary's own words (before the
    repair, which fixes it), the Node gated."""
    seen = eventually(
        "agent-v4's RestartUnsafe True",
        lambda: condition("agent-v4", RESTART_UNSAFE).get("status") == "True" and condition("agent-v4", RESTART_UNSAFE),
        timeout=60,
    )
    assert seen["reason"] == "RestartRefusesStart", seen
    assert "drop-in config version 4 higher than root config version 2" in seen["message"], seen
    assert condition("agent-v4")["status"] == "False", condition("agent-v4")["message"]
    eventually("agent-v4's Node gated", lambda: gated("agent-v4"))


def test_a_pending_kernel_without_its_nvidia_module_is_restart_unsafe_as_over_ssh_and_gated(agents):
    """The runtime fine, the driver loaded and its libraries agreeing: Problem False. The kernel the
    next boot starts has no NVIDIA module: RestartUnsafe True, in the SSH audit's words too, and the
    Node gated, so kured holds the reboot the pending kernel asks for."""
    path, running, root = agents
    _, restart = true_as_over_ssh("agent-driver", (None, "NextBootNoModule"), path, root)
    assert (
        f"the next boot starts kernel {drivers.NEWER} (GRUB_DEFAULT=0: the newest kernel in /boot)"
        in (restart["message"])
    )
    assert "a reboot is pending: /run/reboot-required" in restart["message"]
    eventually("agent-driver's Node gated", lambda: gated("agent-driver"))
    said = metrics(running.ports["agent-driver"])
    assert 'gpuop_agent_gap{kind="next-boot-no-module"} 1.0' in said


def test_the_incident_on_2_4_is_a_problem_now_its_restart_safe_and_not_gated(agents):
    """The seed's drop-in written after containerd 2.4.2 started: its GPU Pod refused now
    (Problem True), its next start would load the handler (RestartUnsafe False): no gate, and the
    SSH audit's gaps all in the Problem."""
    path, running, root = agents
    problem, restart = true_as_over_ssh("agent-incident-24", ("SandboxFails", None), path, root)
    assert restart["status"] == "False"
    assert not gated("agent-incident-24")


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


@pytest.fixture(scope="module")
def scraped(agents):
    """kube-state-metrics on the lab's cluster (its Nodes): a function that scrapes it."""
    with kube_state_metrics(os.environ["KUBECONFIG"], agents[2]) as scrape:
        yield scrape


def ksm_says(scrape, node: str, status: str) -> list:
    """kube-state-metrics' series of gpuop's two conditions on ``node`` once both are 1 on ``status``
    (``true``, ``false``)."""

    def both():
        series = node_conditions(scrape(), node)
        on = {labels["condition"] for labels, value in series if labels["status"] == status and value == 1}
        return on == set(CONDITIONS) and series

    return eventually(f"kube-state-metrics: {node}'s two conditions {status}", both, timeout=60)


def test_the_repair_turns_it_false_its_transition_moved_once_more(agents, scraped):
    """``pyinfra nodes.py fix.py --data nodes_from=agents``: the nodes whose agent says a gap are
    repaired, the healthy one not touched; the incident's condition False again. The real
    kube-state-metrics says both conditions true, then false; its very series, given to promtool,
    fire the chart's two alerts before and none after."""
    path, running, root = agents
    ports = running.ports
    true = eventually(
        "agent-incident's condition True",
        lambda: condition("agent-incident").get("status") == "True" and condition("agent-incident"),
        timeout=60,
    )
    series = ksm_says(scraped, "agent-incident", "true")
    fired = {
        name: [{"condition": kind, "node": "agent-incident", "status": "true", "severity": "warning"}]
        for name, kind in (("GPURuntimeProblem", PROBLEM), ("GPURuntimeRestartUnsafe", RESTART_UNSAFE))
    }
    tested = alerts_on(series, fired)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # the nodes taken from their agents: those whose condition says a gap, the healthy one left alone
    run = deploy(None, "nodes_from=agents", env={"GPUOP_NODES": path}, inventory="nodes.py", script="fix.py")
    assert run.code == 0, run.log[-3000:]
    taken = re.search(r"--> the nodes their agents say a gap of \(.*\): (.*)\n", run.log)
    assert taken and taken.group(1) == "ssh-agent-incident, ssh-agent-incident-24, ssh-agent-v4", run.log[:3000]
    assert "not taken: ssh-agent-healthy: its agent says False (NoGap)" in run.log
    # a node whose only gap is its driver's next boot: the repair changes no driver, it names why
    assert (
        "not taken: ssh-agent-driver: its agent's gaps are the NVIDIA driver's, which the repair does not change: "
        f"[next-boot-no-module] the next boot starts kernel {drivers.NEWER}"
    ) in run.log, run.log[:3000]
    assert "[ssh-agent-healthy]" not in run.log, run.log[-3000:]  # not a host of the run
    false = eventually(
        "agent-incident's condition False",
        lambda: condition("agent-incident").get("status") == "False" and condition("agent-incident"),
        timeout=3 * INTERVAL_S + 30,
    )
    assert false["lastTransitionTime"] != true["lastTransitionTime"]
    eventually(
        "agent-incident's RestartUnsafe False", lambda: condition("agent-incident", RESTART_UNSAFE)["status"] == "False"
    )
    series = ksm_says(scraped, "agent-incident", "false")
    tested = alerts_on(series, {"GPURuntimeProblem": [], "GPURuntimeRestartUnsafe": [], "GPURuntimeUnknown": []})
    assert tested.returncode == 0, tested.stdout + tested.stderr
    said = agent_events("agent-incident")
    # each condition's last Event says it False (a reason may move on the way: the restart's moment)
    assert "RestartTakesCriDown" in said[:2] and last_events("agent-incident") == {
        PROBLEM: "NoGap",
        RESTART_UNSAFE: "NoGap",
    }, said
    assert 'gpuop_agent_gap{kind="restart-takes-cri-down"} 0.0' in metrics(ports["agent-incident"])
    eventually("agent-incident's gate lifted", lambda: not gated("agent-incident"))


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


def test_what_a_node_holds_neither_ends_the_agent_nor_leaves_it_saying_false(agents):
    """agent-healthy's conf.d given a drop-in that is not UTF-8 text and one past the read's bound,
    and the node a process named k3s in a PID namespace of its own (as a container's is): the agent
    lives and judges on, each file named unread (Problem True, never the False it said before),
    the process not taken for the node's kubelet; all of them gone, False again."""
    path, running, root = agents
    node = next(n for n in NODES if n.name == "agent-healthy")
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    inside = f"/proc/{simnodes.ns_pid(node)}/root"
    binary, huge = f"{inside}/etc/containerd/conf.d/50-binary.toml", f"{inside}/etc/containerd/conf.d/90-huge.toml"
    with open(binary, "wb") as f:
        f.write(b"version = 2\n\xff\xfe not text\n")
    with open(huge, "wb") as f:
        f.truncate(2 * 2**20)  # sparse: nothing written to the disk
    k3s = f"{inside}/var/lib/gpuop-test-k3s"
    os.makedirs(k3s, exist_ok=True)
    shutil.copy("/bin/sleep", f"{k3s}/k3s")
    contained = subprocess.Popen(
        [
            "nsenter",
            "-t",
            str(simnodes.ns_pid(node)),
            "-m",
            "-p",
            "--",
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "/var/lib/gpuop-test-k3s/k3s",
            "300",
        ]
    )
    try:
        seen = eventually(
            "agent-healthy's files named unread",
            lambda: condition("agent-healthy").get("status") == "True" and condition("agent-healthy"),
            timeout=30,
        )
        for name, why in (("50-binary", "not UTF-8 text"), ("90-huge", "2.0 MiB, above the read's bound of 1 MiB")):
            said = f"[view-unread] the file /etc/containerd/conf.d/{name}.toml of containerd 2.4.2 was not read ({why})"
            assert said in seen["message"], seen
        assert "no-containerd" not in seen["message"] and "k3s" not in seen["message"], seen
        judged = judgments(running.ports["agent-healthy"])
        eventually("two judgments more", lambda: judgments(running.ports["agent-healthy"]) >= judged + 2, timeout=30)
        assert running.running["agent-healthy"].poll() is None
        assert condition("agent-healthy")["status"] == "True"
    finally:
        contained.kill()
        contained.wait(10)
        for f in (binary, huge):
            os.remove(f)
        shutil.rmtree(k3s, ignore_errors=True)
    eventually(
        "agent-healthy's condition False again", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )


def test_its_conditions_removed_or_stamped_ahead_by_hand_are_back_within_an_interval_with_an_event(agents):
    """Another writer's hand on agent-healthy's conditions: removed, they are back within an interval
    (2 s here) with their transition as it was and an Event that says so; a heartbeat stamped a day
    ahead is written again as quickly."""
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    before = condition("agent-healthy")
    found = get("node/agent-healthy")["status"]["conditions"]
    removed = [
        {"op": "remove", "path": f"/status/conditions/{i}"}
        for i, c in reversed(list(enumerate(found)))
        if c["type"] in CONDITIONS
    ]
    kubectl("patch", "node", "agent-healthy", "--subresource=status", "--type=json", "-p", json.dumps(removed))
    back = eventually(
        "agent-healthy's conditions back",
        lambda: condition("agent-healthy").get("status") == "False" and condition("agent-healthy"),
        timeout=2 * INTERVAL_S + 2,
    )
    assert back["lastTransitionTime"] == before["lastTransitionTime"], (before, back)
    said = get("events", "default", fieldSelector="involvedObject.name=agent-healthy,source=gpuop-agent")["items"]
    assert any(RESTORED in e["message"] for e in said), [e["message"] for e in said]
    ahead = {"status": {"conditions": [{**back, "lastHeartbeatTime": "2099-01-01T00:00:00Z"}]}}
    kubectl("patch", "node", "agent-healthy", "--subresource=status", "-p", json.dumps(ahead))
    eventually(
        "its heartbeat written again",
        lambda: condition("agent-healthy")["lastHeartbeatTime"] < "2099",
        timeout=2 * INTERVAL_S + 2,
    )


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


def job_of(name: str, runtime_class: str) -> dict:
    """A Pod of ``runtime_class`` bound to agent-healthy, in default."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "agent-healthy",
            "runtimeClassName": runtime_class,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "job", "image": READ_IMAGE}],
        },
    }


def test_a_runtimeclass_is_read_with_the_first_pod_that_names_it_not_at_each_judgment(agents):
    """Two watches a node, the RuntimeClasses read when needed: the class of agent-healthy's GPU Pod
    made again with a handler the node does not load, its judgments go on as read (not one
    request); a new Pod of that class, the class is read with it: its sandbox cannot start (True,
    within seconds). The class as it was and the Pod gone, the agent started again (no class kept)
    says False."""
    path, running, root = agents
    node = next(n for n in NODES if n.name == "agent-healthy")
    port = running.ports["agent-healthy"]

    def nvidia(handler: str) -> str:
        return json.dumps(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "fleet-nvidia"},
                "handler": handler,
            }
        )

    pod = job_of("agent-later-job", "fleet-nvidia")
    assert get("runtimeclass/fleet-nvidia")["handler"] == "nvidia"
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    kubectl("delete", "runtimeclass", "fleet-nvidia")  # a class's handler cannot change: made again
    kubectl("apply", "-f", "-", stdin=nvidia("fleet-unloaded"))
    try:
        before, judged = requests(port), judgments(port)
        eventually("three judgments more", lambda: judgments(port) >= judged + 3, timeout=30)
        sent = {verb: n - before.get(verb, 0) for verb, n in requests(port).items()}
        assert not any(n for verb, n in sent.items() if verb != "WATCH"), sent
        assert condition("agent-healthy")["status"] == "False"
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        bound = time.monotonic()
        seen = eventually(
            "agent-healthy's condition True",
            lambda: condition("agent-healthy").get("status") == "True" and condition("agent-healthy"),
            timeout=30,
        )
        assert time.monotonic() - bound <= 5, f"judged {time.monotonic() - bound:.1f}s after the Pod was bound"
        said = "[sandbox-fails] Pod default/agent-later-job (RuntimeClass fleet-nvidia, handler fleet-unloaded)"
        assert said in seen["message"], seen
    finally:
        kubectl(
            "delete", "pod", "-n", "default", "agent-later-job", "--ignore-not-found", "--grace-period=0", "--force"
        )
        kubectl("delete", "runtimeclass", "fleet-nvidia")
        kubectl("apply", "-f", "-", stdin=nvidia("nvidia"))
    running.stop("agent-healthy")
    running.start(node)
    eventually(
        "agent-healthy's condition False again", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )


def test_an_api_server_stalled_for_30_s_is_waited_out(agents):
    """The API server stopped (SIGSTOP) for 30 s: the agent lives on, judging from what its
    watches hold (a judgment needs no read), and judges again once the API server answers."""
    path, running, root = agents
    port = running.ports["agent-incident"]
    with open(component_pidfile("kube-apiserver")) as f:
        apiserver = int(f.read())
    was = written("agent-incident")
    os.kill(apiserver, signal.SIGSTOP)
    try:
        time.sleep(30)  # the stall itself is the test's condition: nothing to poll while the API server is stopped
        during = judgments(port)
    finally:
        os.kill(apiserver, signal.SIGCONT)
        if control_plane_faults():  # a controller that lost its lease meanwhile exits: the Nodes kept, it starts again
            heal_lab()
    resumed = time.time()
    assert running.running["agent-incident"].poll() is None  # alive
    assert during > 0
    eventually(
        "a judgment after the API server came back",
        lambda: last_judged(port) > resumed,
        timeout=60,
    )
    assert condition("agent-incident")["status"] == was


def written(node: str) -> str:
    """``node``'s condition's status once its agent has written one."""
    return eventually(f"{node}'s condition written", lambda: condition(node).get("status"), timeout=60)


def last_judged(port: int) -> float:
    return float(re.search(r"^gpuop_agent_last_judgment_timestamp_seconds (\S+)$", metrics(port), re.M).group(1))


def requests(port: int) -> dict:
    """The agent's requests to the API server so far, by verb (a watch counted as WATCH)."""
    found = re.findall(r'^gpuop_agent_api_requests_total\{verb="(\w+)"\} (\S+)$', metrics(port), re.M)
    return {verb: float(n) for verb, n in found}


def test_a_steady_agent_at_a_2_s_interval_sends_no_read_for_30_s(agents):
    """Its Node and Pods are its watches', what else it needs kept: 15 judgments in 30 s and
    not one GET or LIST, no write either (the condition unchanged, its heartbeat 5 minutes away),
    by its own count and by the API server's (no list of those kinds from any client)."""
    path, running, root = agents
    port = running.ports["agent-healthy"]
    eventually(
        "agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False", timeout=60
    )
    eventually("agent-healthy's watches in sync", lambda: ready(port), timeout=60)
    before, judged, served = requests(port), judgments(port), apiserver_series()["requests"]
    time.sleep(30)  # the steady state is the test's condition: what is counted is what was sent in it
    after, listed = requests(port), apiserver_series()["requests"]
    assert judgments(port) - judged >= 10
    sent = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in after}
    assert sent.get("GET", 0) == 0 and sent.get("PATCH", 0) == 0 and sent.get("POST", 0) == 0, sent
    # The API server's own count, every client's: the lists a judgment sent before its watches
    # (its Node, its Pods, its ResourceSlices, across all namespaces) not one more, from any agent.
    lists = {
        key: n - served.get(key, 0)
        for key, n in listed.items()
        if key[0] == "LIST" and key[1] in ("nodes", "pods", "resourceslices", "runtimeclasses") and key[3] == "cluster"
    }
    assert not any(lists.values()), lists


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def test_a_gpu_pod_bound_is_judged_within_5_s_with_a_60_s_interval(agents):
    """The change the API server announces is judged at once, not at the next interval: a Pod
    whose RuntimeClass's handler the node does not load, bound to agent-healthy whose agent reads
    its node every 60 s: True within 5 s; the Pod deleted, False again as quickly."""
    path, running, root = agents
    node = next(n for n in NODES if n.name == "agent-healthy")
    running.stop("agent-healthy")
    running.start(node, interval_s=60)
    port = running.ports["agent-healthy"]
    missing = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "agent-unloaded"},
        "handler": "unloaded",
    }
    pod = job_of("agent-gpu-job", "agent-unloaded")
    try:
        eventually("agent-healthy's agent judged once", lambda: _answers(port) and judgments(port) >= 1, timeout=60)
        eventually("agent-healthy's condition False", lambda: condition("agent-healthy").get("status") == "False")
        kubectl("apply", "-f", "-", stdin=json.dumps(missing))
        time.sleep(1)  # the RuntimeClass first, as a user applies it: its own change is judged too
        bound = time.monotonic()
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        seen = eventually(
            "agent-healthy's condition True",
            lambda: condition("agent-healthy").get("status") == "True" and condition("agent-healthy"),
            timeout=30,
        )
        took = time.monotonic() - bound
        assert "[sandbox-fails] Pod default/agent-gpu-job (RuntimeClass agent-unloaded" in seen["message"], seen
        assert took <= 5, f"judged {took:.1f}s after the Pod was bound"
        kubectl("delete", "pod", "-n", "default", "agent-gpu-job", "--grace-period=0", "--force")
        eventually(
            "agent-healthy's condition False again",
            lambda: condition("agent-healthy").get("status") == "False",
            timeout=10,
        )
    finally:
        kubectl("delete", "pod", "-n", "default", "agent-gpu-job", "--ignore-not-found", "--grace-period=0", "--force")
        kubectl("delete", "runtimeclass", "agent-unloaded", "--ignore-not-found")
        running.stop("agent-healthy")
        running.start(node)


def test_the_api_server_restarted_its_watches_come_back_listed_again_the_condition_still_right(agents):
    """kube-apiserver killed and started again (as an upgrade does): each watch breaks, is taken
    up after its jittered backoff, listed again where its version is gone, and the agent is
    ready again with the conditions as they were; a change after it is still seen."""
    path, running, root = agents
    port = running.ports["agent-incident"]
    eventually("agent-incident's watches in sync", lambda: ready(port), timeout=60)
    was = {name: written(name) for name in ("agent-incident", "agent-healthy")}
    before = requests(port)
    pid = kill_component("kube-apiserver")
    eventually(f"kube-apiserver pid {pid} to exit", lambda: exited(pid))
    heal_lab()
    eventually("agent-incident's watches in sync again", lambda: ready(port), timeout=90)
    after = requests(port)
    assert after.get("WATCH", 0) > before.get("WATCH", 0), (before, after)
    assert {name: condition(name)["status"] for name in was} == was
    eventually("a judgment after the restart", lambda: judgments(port) > 0 and last_judged(port) > time.time() - 10)


def test_forget_takes_gpuop_s_conditions_and_label_off_every_node_once_the_agents_are_gone(agents):
    """A kustomize user's uninstall (``python -m gpuop.agent --forget``): here the agents are
    processes, stopped first (no DaemonSet: said, not an error); then no Node keeps gpuop's
    conditions or gate, each cleared one named."""
    path, running, root = agents
    for name in list(running.running):
        running.stop(name)
    kubectl("label", "node", "agent-healthy", f"{GATE}=true")  # as a gate its agent left would be
    done = subprocess.run(
        [sys.executable, "-m", "gpuop.agent", "--forget", "--kubeconfig", os.environ["KUBECONFIG"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the agents' DaemonSet gpuop-system/gpuop-agent: none" in done.stdout, done.stdout
    for n in NODES:
        assert f"{n.name}: removed " in done.stdout, done.stdout
        assert not [c for c in get(f"node/{n.name}")["status"].get("conditions") or [] if c["type"] in CONDITIONS]
        assert not gated(n.name)
    both = f"removed {PROBLEM}, {RESTART_UNSAFE}"
    assert f"gpuop-agent: agent-healthy: {both}, label {GATE}\n" in done.stdout, done.stdout
    assert f"gpuop-agent: agent-v4: {both}" in done.stdout, done.stdout
