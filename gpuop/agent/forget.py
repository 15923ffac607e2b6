"""Uninstall leaves nothing: gpuop's conditions (``CONDITIONS``) and its restart gate's label
(``GATE``) taken off every Node, after the agents are gone (a live agent would write them again
at its next judgment). Conditions outlive the agent that wrote them otherwise
(node-problem-detector#423): a stale one feeds alerts, and a stale gate holds reboots for good.

    forget(api, "gpuop-system/gpuop-agent", say=print)
    # -> the DaemonSet deleted, then each Node cleared once its agent's Pod is gone: ["gpu-a", ...]

The Helm chart runs it as its pre-delete hook; a kustomize user runs ``python -m gpuop.agent
--forget`` before ``kubectl delete -k deploy/agent``.
"""

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.agent.flags import REQUEST_DEADLINE_S
from gpuop.judgment.condition import CONDITIONS, GATE
from gpuop.reach.kubeapi import in_words

WAIT_S = 240  # the whole uninstall, within Helm's default hook timeout (5 minutes) with time to spare
POLL_S = 2
SAY_S = 15  # progress while waiting


class ForgetError(Exception):
    """A Node could not be cleared: which, and why, in one sentence."""


def forget(api: client.ApiClient, daemonset: str, say, wait_s: float = WAIT_S) -> list:
    """The agents' DaemonSet (``NAMESPACE/NAME``; gone already is fine) deleted, then gpuop's
    conditions and gate label taken off each Node that has them as soon as its agent's Pod is gone
    (a live agent would write them again), within ``wait_s``; the Nodes cleared, by name. A Node
    whose agent's Pod outlives the deadline (its node not ready: no kubelet ends the Pod) or that
    the API server refuses to change is left and named in the ``ForgetError``, the others cleared."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace, name = daemonset.split("/", 1)
    deadline = time.monotonic() + wait_s
    try:
        apps.delete_namespaced_daemon_set(name, namespace)
        say(f"the agents' DaemonSet {daemonset} deleted; each Node cleared once its agent's Pod is gone")
    except ApiException as e:
        if e.status != 404:
            raise
        say(f"the agents' DaemonSet {daemonset}: none; each Node cleared once any Pod of it there is gone")
    cleared, refused, said = [], {}, time.monotonic()
    while True:
        running = _agents(core, namespace, name)
        waiting = {}
        for node in core.list_node().items:
            marks = _marks(node)
            if not marks or node.metadata.name in refused:
                continue
            if node.metadata.name in running:
                waiting[node.metadata.name] = running[node.metadata.name]
                continue
            try:
                _clear(core, node.metadata.name, marks)
            except ApiException as e:
                refused[node.metadata.name] = in_words(e, REQUEST_DEADLINE_S)
                continue
            say(f"{node.metadata.name}: removed {', '.join(marks)}")
            cleared.append(node.metadata.name)
        if not waiting or time.monotonic() > deadline:
            break
        if time.monotonic() - said > SAY_S:
            say(f"waiting for {len(waiting)} agent Pod(s) to end: {', '.join(sorted(waiting.values())[:5])}")
            said = time.monotonic()
        time.sleep(POLL_S)
    left = [f"{n}: refused: {why}" for n, why in sorted(refused.items())] + [
        f"{n}: its agent's Pod {pod} still there after {wait_s:.0f}s (a node not ready ends no Pod: delete it, "
        "then forget again)"
        for n, pod in sorted(waiting.items())
    ]
    if left:
        raise ForgetError(f"{len(cleared)} Node(s) cleared {cleared}; not cleared: {'; '.join(left)}")
    say(f"gpuop's conditions and label gone from every Node ({len(cleared)} cleared)")
    return cleared


def _marks(node) -> list:
    """What gpuop left on ``node``: its conditions' types, then its gate's label."""
    conditions = [c.type for c in node.status.conditions or [] if c.type in CONDITIONS]
    return conditions + ([f"label {GATE}"] if GATE in (node.metadata.labels or {}) else [])


def _clear(core: client.CoreV1Api, node: str, marks: list):
    conditions = [m for m in marks if m in CONDITIONS]
    if conditions:
        body = {"status": {"conditions": [{"type": t, "$patch": "delete"} for t in conditions]}}
        core.patch_node_status(node, body)
    if f"label {GATE}" in marks:
        core.patch_node(node, {"metadata": {"labels": {GATE: None}}})


def _agents(core: client.CoreV1Api, namespace: str, name: str) -> dict:
    """The Pods of the DaemonSet ``name`` still there, by the node they are bound to."""
    return {
        p.spec.node_name: p.metadata.name
        for p in core.list_namespaced_pod(namespace).items
        if p.spec.node_name and any(o.kind == "DaemonSet" and o.name == name for o in p.metadata.owner_references or [])
    }
