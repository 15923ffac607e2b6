"""The gate and the conditions held through the agent's own life and against other writers, on a
kwok Node the test makes (its runtime never read: the agent's read there fails, at once or after a
while, so its conditions are Unknown, which it writes as any other): a new agent Pod on a gated
Node is gated before the node's first read and stays so while Unknown; conditions removed or
changed by hand, stamped in the future, or gone with a Node deleted and made again are written
back within an interval, each with an Event; an agent that cannot write what it judged fails
``/healthz``; a watch whose connection fell silent is taken up again, ``/readyz`` saying so
meanwhile."""

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import kubernetes
import pytest

from gpuop.agent.events import RESTORED
from gpuop.agent.health import Health
from gpuop.agent.watched import Watched
from gpuop.judgment.condition import CONDITIONS, GATE, PROBLEM
from lab import labcluster
from tests.helpers.agents import condition, endpoint
from tests.helpers.blackhole import Blackhole
from tests.helpers.kube import eventually, get, kubeconfig_path, kubectl, token_kubeconfig
from tests.helpers.ssh import free_port

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

NODE = "agent-gate"
FAILS = "false"  # an --enter whose read fails at once: the node not read, its conditions Unknown


@pytest.fixture(scope="module")
def node():
    kubectl("apply", "-f", "-", stdin=json.dumps(labcluster.kwok_node(NODE)))
    try:
        yield NODE
    finally:
        kubectl("delete", "node", NODE, "--ignore-not-found")
        kubectl(
            "delete", "events", "-n", "default", f"--field-selector=involvedObject.name={NODE}", "--ignore-not-found"
        )


@contextlib.contextmanager
def agent(tmp_path, *flags, enter: str = FAILS, kubeconfig: str = "", interval_s: int = 2):
    """The agent on NODE every ``interval_s``, its read through ``enter``; yields its metrics port."""
    port = free_port()
    with open(tmp_path / f"agent-{port}.log", "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuop.agent",
                "--node",
                NODE,
                "--interval-s",
                str(interval_s),
                "--read-deadline-s",
                "10",
            ]
            + ["--port", str(port), "--enter", enter, "--kubeconfig", kubeconfig or kubeconfig_path(), *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.returncode in (0, -15), (tmp_path / f"agent-{port}.log").read_text()[-2000:]


def restored_events(kind: str) -> int:
    """How many times the agent's Events on NODE said ``kind`` (short) was written back (the same
    words again are counted on the Event that said them first, as client-go's correlator does)."""
    found = get("events", "default", fieldSelector=f"involvedObject.name={NODE},source=gpuop-agent")["items"]
    return sum(e.get("count") or 1 for e in found if e["message"].startswith(f"{kind} ") and RESTORED in e["message"])


def test_a_new_agent_pod_on_a_gated_node_is_gated_before_its_first_read_and_through_unknown(node, tmp_path):
    kubectl("label", "node", NODE, f"{GATE}=true")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpuop-agent-new", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "a", "image": "x"}],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    slow = "sh -c 'sleep 6; exit 1' --"  # its first read ends only after 6 s
    try:
        with agent(tmp_path, "--pod", "gpuop-agent-new", "--pod-namespace", "default", enter=slow):
            began = time.monotonic()
            eventually(
                "the new agent's Pod gated",
                lambda: (get("pod/gpuop-agent-new", "default")["metadata"].get("labels") or {}).get(GATE) == "true",
                timeout=15,
            )
            assert time.monotonic() - began < 6 and not condition(NODE).get("status"), condition(NODE)
            eventually("its conditions Unknown", lambda: condition(NODE).get("status") == "Unknown", timeout=20)
            assert (get(f"node/{NODE}")["metadata"].get("labels") or {}).get(GATE) == "true"
            assert (get("pod/gpuop-agent-new", "default")["metadata"].get("labels") or {}).get(GATE) == "true"
    finally:
        kubectl(
            "delete", "pod", "-n", "default", "gpuop-agent-new", "--grace-period=0", "--force", "--ignore-not-found"
        )
        kubectl("label", "node", NODE, f"{GATE}-")


def without_conditions():
    """gpuop's conditions taken off NODE, by hand."""
    removed = [
        {"op": "remove", "path": f"/status/conditions/{i}"}
        for i, c in reversed(list(enumerate(get(f"node/{NODE}")["status"].get("conditions") or [])))
        if c["type"] in CONDITIONS
    ]
    if removed:
        kubectl("patch", "node", NODE, "--subresource=status", "--type=json", "-p", json.dumps(removed))


def test_conditions_removed_changed_or_stamped_ahead_come_back_within_an_interval_with_an_event(node, tmp_path):
    without_conditions()  # what the agent finds is none: what it writes is its own
    with agent(tmp_path):
        written = eventually(
            "its conditions written", lambda: condition(NODE).get("status") == "Unknown" and condition(NODE)
        )
        without_conditions()
        back = eventually(
            "its conditions back", lambda: condition(NODE).get("status") == "Unknown" and condition(NODE), timeout=5
        )
        assert back["lastTransitionTime"] == written["lastTransitionTime"], (written, back)
        eventually("an Event saying so", lambda: restored_events("GPURuntimeProblem"), timeout=5)
        for what, changed in (
            ("its status changed by hand", {"status": "False", "reason": "NoGap"}),
            ("its heartbeat stamped a day ahead", {"lastHeartbeatTime": "2099-01-01T00:00:00Z"}),
        ):
            before = restored_events("GPURuntimeProblem")
            body = {"status": {"conditions": [{**condition(NODE), **changed}]}}
            kubectl("patch", "node", NODE, "--subresource=status", "-p", json.dumps(body))
            eventually(
                f"{what}: written back",
                lambda: (
                    condition(NODE).get("status") == "Unknown"
                    and condition(NODE)["lastHeartbeatTime"] < "2099"
                    and restored_events("GPURuntimeProblem") > before
                ),
                timeout=5,
            )
        kubectl("delete", "node", NODE)  # the Node made again, as a node that registers anew
        kubectl("apply", "-f", "-", stdin=json.dumps(labcluster.kwok_node(NODE)))
        eventually(
            "its conditions on the Node made again", lambda: condition(NODE).get("status") == "Unknown", timeout=5
        )


def test_healthz_fails_when_the_agent_cannot_write_what_it_judged(node, tmp_path):
    """A token that reads everything and may write nothing: its judgments end, none is said, and
    past its bound (3 intervals and the read's deadline, 13 s) the liveness probe fails, saying why."""
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "gpuop-test-reader", "namespace": "default"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "gpuop-test-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "gpuop-test-reader", "namespace": "default"}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "gpuop-test-reader-nodes"},
            "rules": [
                {"apiGroups": ["", "node.k8s.io", "resource.k8s.io"], "resources": ["*"], "verbs": ["list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "gpuop-test-reader-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gpuop-test-reader-nodes",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "gpuop-test-reader", "namespace": "default"}],
        },
    ]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    kubectl("apply", "-f", "-", stdin=listed)
    without_conditions()  # a judgment with something to write (conditions it wrote before would stand)
    try:
        path = str(tmp_path / "reader.kubeconfig")
        token_kubeconfig(kubectl("create", "token", "gpuop-test-reader", "-n", "default").strip(), path)
        with agent(tmp_path, kubeconfig=path, interval_s=1) as port:
            said = eventually(
                "/healthz failing",
                lambda: endpoint(port, "/healthz")[0] == 503 and endpoint(port, "/healthz"),
                timeout=40,
            )
            assert "the last not written: the API server refused: 403 Forbidden" in said[1], said
    finally:
        kubectl("delete", "-f", "-", "--ignore-not-found", stdin=listed)


def test_a_watch_that_falls_silent_is_taken_up_again_and_not_ready_meanwhile(node, caplog):
    """Its connection to the API server cut unseen (a TCP forwarder that stops forwarding, every
    socket left open): past its silence bound (here 3 s) the watch is ended, /readyz says which and
    why, and once the network is back it is listed or watched again and ready."""
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig_path(), client_configuration=configuration)
    server = urllib.parse.urlparse(configuration.host)
    with Blackhole((server.hostname, server.port)) as hole:
        configuration.host = f"https://127.0.0.1:{hole.port}"
        api = kubernetes.client.ApiClient(configuration)
        seen = threading.Event()
        watch = Watched(api, "Node", lambda kind, listed: seen.set(), f"metadata.name={NODE}", silent_s=3)
        health = Health(60, [watch])
        watch.start()
        eventually("the watch in sync", lambda: health.ready()[0], timeout=20)
        hole.cut()
        cut = time.monotonic()
        said = eventually("/readyz not in sync", lambda: not health.ready()[0] and health.ready()[1], timeout=20)
        assert time.monotonic() - cut < 12, time.monotonic() - cut
        assert said.startswith("not in sync: Node"), said
        silent = "the Nodes' watch broke: heard nothing for 3s, no event and no bookmark"
        eventually(
            "the watch ended for its silence",
            lambda: any(r.getMessage().startswith(silent) for r in caplog.records),
            timeout=20,
        )
        # the silent watch was ended by the client (its response closed): in sync again is a new
        # request, on whichever connection (one made during the cut is held, then forwarded)
        hole.mend()
        eventually("the watch in sync again", lambda: health.ready()[0], timeout=60)
        assert watch.up and not watch.behind
        seen.clear()
        kubectl("label", "node", NODE, "gpuop.io/test=seen", "--overwrite")
        eventually("a change seen through the new watch", seen.is_set, timeout=10)
        assert watch.items()[0]["metadata"]["labels"]["gpuop.io/test"] == "seen"
        kubectl("label", "node", NODE, "gpuop.io/test-")


def test_forget_clears_every_node_it_can_and_names_the_one_whose_agent_lingers(node):
    """An uninstall where one agent's Pod does not end (its node not ready: here a finalizer holds
    it): every other Node is cleared at once, that one named with its Pod, and the forget ends at
    its deadline, not waiting on it."""
    from gpuop.agent.forget import ForgetError, forget

    namespace, lingering = "gpuop-test-forget", "lab-node-2"
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpuop-agent", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "gpuop-test-agent"}},
            "template": {
                "metadata": {"labels": {"app": "gpuop-test-agent"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": lingering},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "a", "image": "x"}],
                },
            },
        },
    }
    kubectl("create", "namespace", namespace)
    kubectl("apply", "-f", "-", stdin=json.dumps(daemonset))
    pod = eventually(
        "the agent's Pod on lab-node-2",
        lambda: next(iter(get("pods", namespace)["items"]), None),
        timeout=30,
    )["metadata"]["name"]
    kubectl(
        "patch", "pod", "-n", namespace, pod, "-p", json.dumps({"metadata": {"finalizers": ["gpuop.io/test-hold"]}})
    )
    marked = {"status": {"conditions": [{"type": PROBLEM, "status": "True", "reason": "SandboxFails", "message": "t"}]}}
    for name in (NODE, lingering):
        kubectl("patch", "node", name, "--subresource=status", "-p", json.dumps(marked))
        kubectl("label", "node", name, f"{GATE}=true")
    said = []
    began = time.monotonic()
    try:
        with pytest.raises(ForgetError) as e:
            forget(
                kubernetes.config.new_client_from_config(config_file=kubeconfig_path()),
                f"{namespace}/gpuop-agent",
                said.append,
                wait_s=3,
            )
        took = time.monotonic() - began
        assert took < 20, took
        assert f"{NODE}: removed {PROBLEM}, label {GATE}" in said, said
        assert str(e.value).startswith(
            f"1 Node(s) cleared ['{NODE}']; not cleared: {lingering}: its agent's Pod {pod} still there after 3s"
        ), e.value
        assert not condition(NODE) and GATE not in (get(f"node/{NODE}")["metadata"].get("labels") or {})
        assert condition(lingering).get("status") == "True"
    finally:
        kubectl(
            "patch",
            "pod",
            "-n",
            namespace,
            pod,
            "--type=json",
            "-p",
            '[{"op": "remove", "path": "/metadata/finalizers"}]',
            check=False,
        )
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        for name in (NODE, lingering):
            kubectl("label", "node", name, f"{GATE}-", check=False)
        before = get(f"node/{lingering}")["status"]["conditions"]
        kept = [i for i, c in enumerate(before) if c["type"] == PROBLEM]
        if kept:
            kubectl(
                "patch",
                "node",
                lingering,
                "--subresource=status",
                "--type=json",
                "-p",
                json.dumps([{"op": "remove", "path": f"/status/conditions/{kept[0]}"}]),
            )
