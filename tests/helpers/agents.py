"""The node agent run as a process beside a simulated node, and what the tests read of it: its
Events, conditions, series and judgments."""

import json
import os
import re
import urllib.error
import urllib.request

from gpuop.judgment.condition import GATE, PROBLEM, RESTART_UNSAFE, condition_type
from tests.helpers.kube import (
    eventually,
    get,
)
from tests.helpers.playbook import deploy
from tests.helpers.repairs import ENDPOINT, RESTART

INTERVAL_S = 2


COMMON = {"kubelet": ENDPOINT, "registered": True, "supervised": True, "nvidia_runtime": True, "knobs": RESTART}


def condition(node: str, kind: str = PROBLEM) -> dict:
    return next((c for c in get(f"node/{node}")["status"].get("conditions") or [] if c["type"] == kind), {})


def gated(node: str) -> bool:
    """Whether the Node carries the restart gate's label."""
    return (get(f"node/{node}")["metadata"].get("labels") or {}).get(GATE) == "true"


def true_as_over_ssh(node: str, reasons: tuple, path: str, root: str) -> list:
    """``node``'s two conditions once settled with ``reasons`` (Problem's, RestartUnsafe's; None:
    False), and in their messages exactly the gap kinds the fleet audit gives over SSH on the same
    node (nodes file ``path``), each kind in the condition it sets."""

    last = []

    def settled():
        both = [condition(node, kind) for kind in (PROBLEM, RESTART_UNSAFE)]
        wanted = [("True", r) if r else ("False", "NoGap") for r in reasons]
        last[:] = [(c.get("status"), c.get("reason"), c.get("message")) for c in both]
        return [(c.get("status"), c.get("reason")) for c in both] == wanted and both

    try:
        seen = eventually(f"{node}'s conditions {reasons}", settled, timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}: {last}") from None
    report = os.path.join(root, f"audit-{node}.json")
    run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
    with open(report) as f:
        over_ssh = sorted(g["kind"] for g in json.load(f)["nodes"][node]["gaps"])
    said = {c["type"]: re.findall(r"\[([a-z-]+)\] ", c["message"]) if c["status"] == "True" else [] for c in seen}
    assert over_ssh and sorted(said[PROBLEM] + said[RESTART_UNSAFE]) == over_ssh, (seen, run.log[-2000:])
    assert all(condition_type(k) == kind for kind, kinds in said.items() for k in kinds), said
    return seen


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def agent_events(node: str) -> list:
    found = get("events", "default", fieldSelector=f"involvedObject.name={node},source=gpuop-agent")["items"]
    return [e["reason"] for e in sorted(found, key=lambda e: e["metadata"]["creationTimestamp"])]


def judgments(port: int) -> float:
    return float(re.search(r"^gpuop_agent_judgments_total (\S+)$", metrics(port), re.M).group(1))


def _answers(port: int) -> bool:
    try:
        metrics(port)
        return True
    except OSError:
        return False


def endpoint(port: int, path: str) -> tuple:
    """(status, body) of the agent's endpoint ``path`` (``/healthz``, ``/readyz``) on ``port``; (0,
    why) where nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)
