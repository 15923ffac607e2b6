"""The node agent's parts that need no cluster: its flags checked in one place (one sentence and
exit 2 on a bad one), its Events correlated as client-go's, its watches' backoff, its health
endpoints on a real HTTP server, and its node read under one deadline that ends its whole
session, its CPU counted."""

import os
import subprocess
import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from gpuop.agent.events import BURST, REFILL_S, SIMILAR_MAX, Correlator, event_of
from gpuop.agent.flags import FlagError, parse_flags
from gpuop.agent.health import Health, serve
from gpuop.agent.noderead import NodeRead, session_of
from gpuop.agent.watched import BACKOFF_S, backoff_s
from tests.helpers.agents import endpoint
from tests.helpers.ssh import free_port


def test_the_flags_parse_with_their_defaults_and_the_health_bound_follows_them():
    flags = parse_flags(["--node", "gpu-a", "--enter", "nsenter -t 1 -m --"])
    assert (flags.interval_s, flags.heartbeat_s, flags.read_deadline_s, flags.port) == (60, 300, 150, 9909)
    assert flags.enter == ("nsenter", "-t", "1", "-m", "--")
    assert flags.health_bound_s == 3 * 60 + 150


def test_forget_needs_no_node_and_names_the_agents_daemonset():
    env = os.environ.pop("NODE_NAME", None)
    try:
        assert parse_flags(["--forget"]).forget == "gpuop-system/gpuop-agent"
        assert parse_flags(["--forget=gpu-ops/edge-gpuop-agent"]).forget == "gpu-ops/edge-gpuop-agent"
        for bad in ("gpuop-agent", "a/b/c", "/gpuop-agent"):
            with pytest.raises(FlagError) as e:
                parse_flags([f"--forget={bad}"])
            assert str(e.value) == f"--forget: expected the agents' DaemonSet as NAMESPACE/NAME, got {bad!r}"
    finally:
        if env is not None:
            os.environ["NODE_NAME"] = env


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--interval-s", "-1"], "--interval-s: expected seconds, at least 1 and at most 86400, got '-1'"),
        (["--interval-s", "0"], "--interval-s: expected seconds, at least 1 and at most 86400, got '0'"),
        (["--interval-s", "soon"], "--interval-s: expected seconds, at least 1 and at most 86400, got 'soon'"),
        (["--interval-s", "600"], "--heartbeat-s: expected seconds, at least 600 and at most 86400, got '300'"),
        (["--read-deadline-s", "5"], "--read-deadline-s: expected seconds, at least 10 and at most 300, got '5'"),
        (["--port", "70000"], "--port: expected a TCP port from 1 to 65535, or 0 for none, got '70000'"),
        (
            ["--enter", "nsenter '"],
            '--enter: expected a command in shell words, got "nsenter \'" (No closing quotation)',
        ),
        (["--crictl", " "], "--crictl: expected a name, got none"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_flag_is_one_sentence(argv, said):
    with pytest.raises(FlagError) as e:
        parse_flags(["--node", "gpu-a", *argv])
    assert str(e.value) == said


def test_a_bad_flag_exits_2_with_one_line_and_no_traceback():
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuop.agent", "--node", "gpu-a", "--interval-s", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done
    assert done.stderr == "gpuop-agent: --interval-s: expected seconds, at least 1 and at most 86400, got '-1'\n"
    nameless = subprocess.run(
        [sys.executable, "-m", "gpuop.agent"], capture_output=True, text=True, timeout=60, env=env
    )
    assert (nameless.returncode, nameless.stderr.count("\n")) == (2, 1), nameless
    assert "--node (or $NODE_NAME): expected the name of the node this agent judges" in nameless.stderr


def _event(message: str, reason: str = "RestartTakesCriDown") -> dict:
    condition = {"type": "gpuop.io/GPURuntimeProblem", "status": "True", "reason": reason, "message": message}
    return event_of("gpu-a", condition, "2026-12-05T10:00:00Z")


def test_the_same_event_again_is_counted_on_the_one_written_not_written_anew():
    c = Correlator()
    verb, first = c.correlate(_event("[restart-takes-cri-down] a"), 0.0)
    assert (verb, first["count"]) == ("create", 1)
    c.written(first["_key"], "gpu-a.gpuop-x1")
    verb, again = c.correlate(_event("[restart-takes-cri-down] a"), 10.0)
    assert (verb, again["count"], again["metadata"]["name"]) == ("patch", 2, "gpu-a.gpuop-x1")
    verb, other = c.correlate(_event("[restart-takes-cri-down] b"), 20.0)
    assert verb == "create"  # another message: another Event


def test_similar_events_past_the_most_are_aggregated_into_one():
    c = Correlator()
    for i in range(SIMILAR_MAX):
        verb, e = c.correlate(_event(f"[sandbox-fails] Pod p{i}", "SandboxFails"), float(i))
        assert verb == "create" and not e["message"].startswith("(combined")
        c.written(e["_key"], f"e{i}")
    verb, combined = c.correlate(_event("[sandbox-fails] Pod p-next", "SandboxFails"), 20.0)
    assert verb == "create"
    assert combined["message"] == "(combined from similar events): GPURuntimeProblem True: [sandbox-fails] Pod p-next"
    c.written(combined["_key"], "combined")
    verb, counted = c.correlate(_event("[sandbox-fails] Pod p-last", "SandboxFails"), 21.0)
    assert (verb, counted["metadata"]["name"], counted["count"]) == ("patch", "combined", 2)


def test_a_storm_of_events_is_held_to_the_bucket_and_let_through_as_it_refills():
    c = Correlator()
    said = [c.correlate(_event(f"m{i}", f"Reason{i}"), 0.0) for i in range(BURST + 5)]
    assert sum(s is not None for s in said) == BURST
    assert c.correlate(_event("late", "Late"), REFILL_S / 2) is None
    assert c.correlate(_event("later", "Later"), REFILL_S + 1) is not None


def test_the_backoff_is_full_jitter_under_an_exponential_cap():
    assert backoff_s(1, rand=lambda: 1.0) == pytest.approx(1.6)
    assert backoff_s(3, rand=lambda: 0.5) == pytest.approx(3.2)
    assert backoff_s(30, rand=lambda: 1.0) == BACKOFF_S[1]
    assert backoff_s(2, rand=lambda: 0.0) == 0.0


class _Watch:
    def __init__(self, kind, synced, up, behind="", silent=False):
        import threading

        self.kind, self.synced, self.up, self.behind, self.quiet = kind, threading.Event(), up, behind, silent
        if synced:
            self.synced.set()

    def silent(self):
        return self.quiet


def test_healthz_fails_past_its_bound_and_readyz_says_which_watch_is_behind():
    now = [100.0]
    watches = [_Watch("Node", True, True), _Watch("Pod", False, False)]
    health = Health(330, watches, clock=lambda: now[0])
    port = free_port()
    server = serve(port, CollectorRegistry(), health)
    try:
        assert endpoint(port, "/healthz") == (200, "ok: judged 0s ago\n")
        now[0] += 331
        assert endpoint(port, "/healthz") == (
            503,
            "no judgment said for 331s, past 330s (three intervals and the read's deadline)\n",
        )
        health.judged()
        assert endpoint(port, "/healthz")[0] == 200
        # judgments whose writes all fail are no sign of life: past the bound, the probe fails, saying why
        now[0] += 200
        health.judged("the API server refused: 403 Forbidden")
        assert endpoint(port, "/healthz")[0] == 200
        now[0] += 200
        health.judged("the API server refused: 403 Forbidden")
        assert endpoint(port, "/healthz") == (
            503,
            "no judgment said for 400s, past 330s (three intervals and the read's deadline); the last not "
            "written: the API server refused: 403 Forbidden\n",
        )
        health.judged()
        assert endpoint(port, "/healthz")[0] == 200
        assert endpoint(port, "/readyz") == (503, "not in sync: Pod\n")
        watches[1].synced.set()
        watches[1].up = True
        assert endpoint(port, "/readyz") == (200, "ok: every watch in sync\n")
        # a watch that heard nothing past its bookmarks' interval is not in sync, and says why
        watches[0].quiet, watches[0].behind = True, "heard nothing for 90s, no event and no bookmark"
        assert endpoint(port, "/readyz") == (
            503,
            "not in sync: Node (heard nothing for 90s, no event and no bookmark)\n",
        )
        assert endpoint(port, "/metrics")[0] == 200
    finally:
        server.shutdown()


def test_a_read_past_its_deadline_is_ended_with_its_whole_session():
    """The read's deadline ends every process of its session, those a ``timeout`` put in a process
    group of their own too (as the read's sections are): none is left."""
    mark = f"gpuop-read-{os.getpid()}-{time.monotonic_ns()}"
    # the enter command stands for a host whose read hangs: a grandchild in a group of its own
    enter = ["sh", "-c", f"timeout 60 sh -c 'sleep 60; : {mark}' & sleep 60; : {mark}", "enter"]
    began = time.monotonic()
    answer = NodeRead(enter, "crictl", 1)()
    assert time.monotonic() - began < 8
    assert (answer.read, answer.unread) == (None, "the node's read did not end within 1s")
    time.sleep(0.5)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read() and session_of(int(pid)) is not None:
                    left.append(pid)
        except OSError:
            pass
    assert left == [], left


def test_the_read_s_cpu_is_counted_from_its_processes():
    answer = NodeRead([], "crictl", 30)()
    assert answer.unread == "" and answer.read is not None, answer
    assert answer.read["hostname"], answer.read
    assert answer.cpu_s > 0, answer


class _Core:
    """What the gate sends, in order: (what, name, body)."""

    def __init__(self):
        self.sent = []

    def patch_node(self, name, body, **_):
        self.sent.append(("Node", name, body))

    def patch_namespaced_pod(self, name, namespace, body, **_):
        self.sent.append(("Pod", f"{namespace}/{name}", body))


def _obj(name, version, labels=None, namespace=None):
    meta = {"name": name, "resourceVersion": version, "labels": labels or {}}
    return {"metadata": {**meta, **({"namespace": namespace} if namespace else {})}}


def test_the_restart_gate_labels_the_node_and_the_agent_s_own_pod_only_while_restart_unsafe_is_true():
    from gpuop.agent.gate import RestartGate
    from gpuop.judgment.condition import GATE

    core = _Core()
    gate = RestartGate(core, "gpu-a", "agent-x", "gpuop-system")
    other = _obj("train-0", "5", namespace="ml")
    node, own = _obj("gpu-a", "1"), _obj("agent-x", "2", namespace="gpuop-system")
    gate.keep("True", node, [other, own])
    put = {"metadata": {"labels": {GATE: "true"}}}
    assert core.sent == [("Node", "gpu-a", put), ("Pod", "gpuop-system/agent-x", put)]  # never another Pod
    gate.keep("True", node, [other, own])  # the watches have not said it yet: not written twice
    assert len(core.sent) == 2
    node, own = _obj("gpu-a", "3", {GATE: "true"}), _obj("agent-x", "4", {GATE: "true"}, "gpuop-system")
    gate.keep("True", node, [own])
    gate.keep("Unknown", node, [own])  # not known: left as it is
    assert len(core.sent) == 2
    # a new agent Pod on a gated Node: gated from its start, while nothing is known yet
    new = _obj("agent-y", "9", namespace="gpuop-system")
    young = RestartGate(core, "gpu-a", "agent-y", "gpuop-system")
    young.keep("Unknown", node, [own, new])
    assert core.sent[2:] == [("Pod", "gpuop-system/agent-y", put)]
    young.keep("Unknown", _obj("gpu-a", "10"), [_obj("agent-y", "11", {GATE: "true"}, "gpuop-system")])
    assert len(core.sent) == 3  # a Node not gated lifts nothing while not known
    del core.sent[2:]
    gate.keep("False", node, [own])
    lift = {"metadata": {"labels": {GATE: None}}}
    assert core.sent[2:] == [("Node", "gpu-a", lift), ("Pod", "gpuop-system/agent-x", lift)]
    outside = _Core()  # an agent run outside a Pod: its Node only
    RestartGate(outside, "gpu-a").keep("True", _obj("gpu-a", "1"), [own])
    assert [what for what, *_ in outside.sent] == ["Node"]


def test_a_change_every_node_hears_at_once_is_judged_at_a_time_spread_over_the_jitter():
    """A change of its own node's (a Pod bound) is judged half a second after it; one every agent
    of the fleet hears at once (a whole list again, the first change after a watch broke: an API
    server came back) at a time drawn over the interval's jitter (6 s at 60 s), so that a fleet's
    writes spread."""
    from kubernetes import client

    from gpuop.agent.agent import JITTER, SETTLE_S, Agent
    from gpuop.agent.metrics import Metrics

    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"  # never asked: nothing is started
    agent = Agent(client.ApiClient(configuration), parse_flags(["--node", "gpu-a"]), Metrics(CollectorRegistry()))

    def after(kind, listed):
        agent.due = None
        began = time.monotonic()
        agent.announced(kind, listed)
        return agent.due - began

    assert SETTLE_S <= after("Pod", False) < SETTLE_S + 0.1
    spread = JITTER * 60
    for kind, listed in (("Pod", True), ("Node", True)):
        drawn = [after(kind, listed) for _ in range(200)]
        assert SETTLE_S <= min(drawn) and max(drawn) < spread + 0.1, (kind, listed)
        assert max(drawn) - min(drawn) > spread / 2, (kind, listed)  # spread, not one second for all
    agent.due = None
    agent.announced("Node", True)
    agent.announced("Pod", False)  # the earlier of two is when the judgment is due
    assert agent.due - time.monotonic() <= SETTLE_S


class _Read:
    """A reader of the kept objects that counts its reads, by key."""

    def __init__(self, objects):
        self.objects, self.asked = objects, []

    def __call__(self, key):
        self.asked.append(key)
        return self.objects.get(key, [])


def test_a_runtime_class_is_read_with_the_first_pod_that_names_it_kept_and_read_again_only_after_its_time():
    """Two watches a node, the rest read when needed: a class read when a Pod not seen before names
    it (a new class, a changed handler: judged with that Pod), not at each judgment, read again
    after its time (2 to 4 hours, drawn), forgotten once no Pod names it."""
    from gpuop.agent.kept import REREAD_S, RuntimeClasses

    now = [0.0]
    classes = RuntimeClasses(_api(), clock=lambda: now[0], draw=lambda a, b: a)
    read = _Read({"nvidia": [{"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}]})
    classes.kept.read = read

    def pod(uid, rc="nvidia", phase="Running"):
        return {"metadata": {"uid": uid}, "spec": {"runtimeClassName": rc}, "status": {"phase": phase}}

    assert classes.of([pod("a")])[0]["handler"] == "nvidia" and read.asked == ["nvidia"]
    for _ in range(5):  # steady: no read
        assert classes.of([pod("a")]) and read.asked == ["nvidia"]
    classes.of([pod("a"), pod("b")])  # a new Pod names it: read again, with that Pod
    assert read.asked == ["nvidia", "nvidia"]
    now[0] += REREAD_S[0] - 1
    classes.of([pod("a"), pod("b")])
    assert len(read.asked) == 2
    now[0] += 2  # past its time
    classes.of([pod("a"), pod("b")])
    assert len(read.asked) == 3
    assert classes.of([pod("c", "gone")]) == [] and read.asked[-1] == "gone"  # a class not found: none
    assert list(classes.kept.kept) == ["gone"]  # nvidia forgotten: no Pod names it
    assert classes.of([pod("d", "x", phase="Succeeded"), {"metadata": {"uid": "e"}, "spec": {}}]) == []


def test_the_node_s_resource_slices_are_listed_only_where_a_pod_claims_a_device():
    from gpuop.agent.kept import ResourceSlices

    now = [0.0]
    slices = ResourceSlices(_api(), "gpu-a", clock=lambda: now[0], draw=lambda a, b: a)
    read = _Read({"gpu-a": [{"kind": "ResourceSlice", "spec": {"nodeName": "gpu-a"}}]})
    slices.kept.read = read
    plain = {"metadata": {"uid": "a"}, "spec": {}, "status": {"phase": "Running"}}
    claiming = {"metadata": {"uid": "b"}, "spec": {"resourceClaims": [{"name": "gpu"}]}, "status": {}}
    assert slices.of([plain]) == [] and read.asked == []
    assert len(slices.of([plain, claiming])) == 1 and read.asked == ["gpu-a"]
    assert len(slices.of([plain, claiming])) == 1 and read.asked == ["gpu-a"]  # kept
    assert slices.of([plain]) == [] and slices.kept.kept == {}


def _api():
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"  # never asked: the reads are the test's
    return client.ApiClient(configuration)
