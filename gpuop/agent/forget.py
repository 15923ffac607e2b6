"""Uninstall leaves nothing: gpuop's conditions (``CONDITIONS``) and its restart gate's label
(``GATE``) taken off every Node, after the agents are gone (a live agent would write them again
at its next judgment). Conditions outlive the agent that wrote them otherwise
(node-problem-detector#423): a stale one feeds alerts, and a stale gate holds reboots for good.

    forget(api, "gpuop-system/gpuop-agent", say=print)
    # -> the DaemonSet deleted, its Pods waited out, then each Node cleared: ["gpu-a", ...]

The Helm chart runs it as its pre-delete hook; a kustomize user runs ``python -m gpuop.agent
--forget`` before ``kubectl delete -k deploy/agent``.
"""

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.condition import CONDITIONS, GATE
from gpuop.reach.kubeapi import in_words

WAIT_S = 300  # for the DaemonSet's Pods to be gone
POLL_S = 2
SAY_S = 15  # progress while waiting


class ForgetError(Exception):
    """The agents did not go, or a Node could not be cleared: in one sentence."""


def forget(api: client.ApiClient, daemonset: str, say, wait_s: float = WAIT_S) -> list:
    """The agents' DaemonSet (``NAMESPACE/NAME``; gone already is fine) deleted and its Pods waited
    out, then gpuop's conditions and gate label taken off every Node that has them; the Nodes
    cleared, by name."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace, name = daemonset.split("/", 1)
    try:
        apps.delete_namespaced_daemon_set(name, namespace)
        say(f"the agents' DaemonSet {daemonset} deleted; waiting for its Pods to end")
    except ApiException as e:
        if e.status != 404:
            raise
        say(f"the agents' DaemonSet {daemonset}: none; waiting for any Pod of it to end")
    _wait_pods_gone(core, namespace, name, say, wait_s)
    cleared = []
    for node in core.list_node().items:
        conditions = [c.type for c in node.status.conditions or [] if c.type in CONDITIONS]
        gated = GATE in (node.metadata.labels or {})
        try:
            if conditions:
                body = {"status": {"conditions": [{"type": t, "$patch": "delete"} for t in conditions]}}
                core.patch_node_status(node.metadata.name, body)
            if gated:
                core.patch_node(node.metadata.name, {"metadata": {"labels": {GATE: None}}})
        except ApiException as e:
            raise ForgetError(
                f"Node {node.metadata.name} not cleared: {in_words(e, 0)}; cleared before it: {cleared}"
            ) from None
        if conditions or gated:
            said = conditions + ([f"label {GATE}"] if gated else [])
            say(f"{node.metadata.name}: removed {', '.join(said)}")
            cleared.append(node.metadata.name)
    say(f"gpuop's conditions and label gone from every Node ({len(cleared)} cleared)")
    return cleared


def _owned(pod, name: str) -> bool:
    return any(o.kind == "DaemonSet" and o.name == name for o in pod.metadata.owner_references or [])


def _wait_pods_gone(core: client.CoreV1Api, namespace: str, name: str, say, wait_s: float):
    deadline, said = time.monotonic() + wait_s, time.monotonic()
    while True:
        left = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace).items if _owned(p, name))
        if not left:
            return
        if time.monotonic() > deadline:
            raise ForgetError(
                f"the agents' Pods in {namespace} did not end within {wait_s:.0f}s; last seen: {', '.join(left)}"
            )
        if time.monotonic() - said > SAY_S:
            say(f"waiting for {len(left)} agent Pod(s) to end: {', '.join(left[:5])}")
            said = time.monotonic()
        time.sleep(POLL_S)
