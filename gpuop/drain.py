"""A node out of service and back, through the API server, as ``kubectl cordon``, ``drain
--ignore-daemonsets`` and ``uncordon`` do, with what the fleet repair adds: a cordon marked as
gpuop's (a node someone else cordoned is never uncordoned by gpuop), a probe Pod that proves a
runtime handler on a node, and the repair's one-at-a-time lock (a Lease). Every wait has a
deadline, says where it is every ``PROGRESS_S``, and ends in ``Stalled``: one sentence naming
what was waited for and the last state seen.

    core = client.CoreV1Api(api_client("", "prod"))
    ours = cordon(core, "gpu-a", "gpuop on ops-1")   # False: someone else cordoned it
"""

import os
import socket
import time
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .containerd import in_one_line
from .repair_plan import CORDONED_BY, REPAIR_FAILED, drainable

PROGRESS_S = 10  # a wait says where it is this often
POLL_S = 1  # how often a wait asks again
LEASE = "gpuop-fleet-repair"  # the repair's lock, one per cluster
LEASE_S = 60  # a lock not renewed for this long is a dead run's


class Stalled(Exception):
    """A step that did not happen: what was waited for, and the last state seen, in one sentence."""


def _plain(api: client.ApiClient, obj) -> dict:
    return api.sanitize_for_serialization(obj)


def wait(what: str, probe, deadline_s: float, say) -> object:
    """Ask ``probe()`` -> (done, last state in words) until done; say the state every PROGRESS_S."""
    start = time.monotonic()
    said = start
    while True:
        done, state = probe()
        if done:
            return done
        now = time.monotonic()
        if now - start >= deadline_s:
            raise Stalled(f"{what}: not within {deadline_s:.0f}s; last seen: {state}")
        if now - said >= PROGRESS_S:
            said = now
            say(f"waiting for {what} ({now - start:.0f}s): {state}")
        time.sleep(POLL_S)


def cordon(core: client.CoreV1Api, node: str, holder: str) -> bool:
    """Mark ``node`` unschedulable as gpuop's (annotation ``gpuop.io/cordoned-by``); False, and
    nothing changed, where someone else cordoned it (it is theirs to put back)."""
    found = core.read_node(node)
    annotations = found.metadata.annotations or {}
    if found.spec.unschedulable and CORDONED_BY not in annotations:
        return False
    if not found.spec.unschedulable or annotations.get(CORDONED_BY) != holder:
        core.patch_node(node, {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDONED_BY: holder}}})
    return True


def cordoned_by_gpuop(core: client.CoreV1Api, node: str) -> bool:
    """Whether gpuop's cordon is on ``node`` (a run that stopped or died left it)."""
    found = core.read_node(node)
    return bool(found.spec.unschedulable) and CORDONED_BY in (found.metadata.annotations or {})


def uncordon(core: client.CoreV1Api, node: str):
    """Put ``node`` back in service and drop gpuop's marks (call only where gpuop cordoned it)."""
    core.patch_node(node, {"spec": {"unschedulable": False},
                           "metadata": {"annotations": {CORDONED_BY: None, REPAIR_FAILED: None}}})


def mark_failed(core: client.CoreV1Api, node: str, words: str):
    """Leave ``node`` cordoned, saying why on it (annotation ``gpuop.io/repair-failed``)."""
    core.patch_node(node, {"metadata": {"annotations": {REPAIR_FAILED: words[:1000]}}})


def _blocking_budgets(api: client.ApiClient, pod: dict) -> list:
    """The PodDisruptionBudgets of the Pod's namespace that select it and allow no disruption now
    (the API server matches the selectors)."""
    policy, core = client.PolicyV1Api(api), client.CoreV1Api(api)
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    found = []
    for pdb in policy.list_namespaced_pod_disruption_budget(ns).items:
        selector = pdb.spec.selector
        terms = [f"{k}={v}" for k, v in sorted((selector.match_labels or {}).items())] if selector else []
        terms += [f"{e.key} {e.operator.lower()} ({','.join(e.values or [])})" if e.values else
                  (e.key if e.operator == "Exists" else f"!{e.key}") for e in (selector.match_expressions or [])] if selector else []
        if core.list_namespaced_pod(ns, label_selector=",".join(terms), field_selector=f"metadata.name={name}").items:
            found.append(f"{ns}/{pdb.metadata.name} (disruptions allowed: {(pdb.status.disruptions_allowed if pdb.status else 0) or 0})")
    return found


def drain(api: client.ApiClient, node: str, deadline_s: float, delete_unmanaged: bool, say) -> list:
    """Every Pod a controller owns on ``node`` evicted through the Eviction API, PodDisruptionBudgets
    honoured, and gone; DaemonSet and mirror Pods stay. A Pod no controller owns stops the drain
    (``Stalled``, naming it) unless ``delete_unmanaged`` deletes it, as ``--force`` does. Returns
    the Pods evicted (``namespace/name``).

        drain(api, "gpu-a", 300, False, logger.info) -> ["ml/train-7d9f-x2"]
    """
    core = client.CoreV1Api(api)
    pods = [_plain(api, p) for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items]
    unmanaged = [p for p in pods if drainable(p) == "unmanaged"]
    if unmanaged and not delete_unmanaged:
        names = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in unmanaged)
        raise Stalled(f"drain of {node}: Pod(s) {names} are owned by no controller, so nothing would bring them "
                      "back (drain_unmanaged=true deletes them, as kubectl drain --force does)")
    leaving = [p for p in pods if drainable(p) in ("evict", "unmanaged")]
    start = time.monotonic()
    for p in leaving:
        ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
        if drainable(p) == "unmanaged":
            core.delete_namespaced_pod(name, ns)
            continue
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))

        def evicted():
            try:
                core.create_namespaced_pod_eviction(name, ns, body)
                return True, ""
            except ApiException as e:
                if e.status == 404:
                    return True, ""
                if e.status == 429:  # a PodDisruptionBudget allows no disruption now
                    budgets = _blocking_budgets(api, p)
                    return False, f"Pod {ns}/{name} held by PodDisruptionBudget {', '.join(budgets) or '(one of its namespace)'}"
                raise

        wait(f"the eviction of Pod {ns}/{name} from {node}", evicted, deadline_s - (time.monotonic() - start), say)
    uids = {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in leaving}

    def gone():
        left = [uids[p.metadata.uid] for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
                if p.metadata.uid in uids]
        return not left, f"{len(left)} Pod(s) still on it: {', '.join(sorted(left))}"

    wait(f"the evicted Pods to leave {node}", gone, max(1.0, deadline_s - (time.monotonic() - start)), say)
    return sorted(uids.values())


def probe(api: client.ApiClient, node: str, runtime_class: str, image: str, namespace: str, deadline_s: float, say):
    """A Pod of RuntimeClass ``runtime_class`` bound to ``node`` (past its cordon and taints) runs
    its one command to the end: its sandbox started, through the handler. Deleted after, whatever
    happened; ``Stalled`` names the kubelet's own event where it did not.
    """
    core = client.CoreV1Api(api)
    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "gpuop-probe-", "namespace": namespace,
                             "labels": {"app.kubernetes.io/managed-by": "gpuop", "gpuop.io/probe-node": node}},
                "spec": {"nodeName": node, "runtimeClassName": runtime_class, "restartPolicy": "Never",
                         "tolerations": [{"operator": "Exists"}], "activeDeadlineSeconds": int(deadline_s) + 30,
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "probe", "image": image, "imagePullPolicy": "IfNotPresent",
                                         "command": ["/bin/sh", "-c", "true"]}]}}
    name = core.create_namespaced_pod(namespace, manifest).metadata.name
    try:
        def ran():
            pod = _plain(api, core.read_namespaced_pod(name, namespace))
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Running"):
                return True, phase
            events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
            failed = [e.message for e in events if e.reason == "FailedCreatePodSandBox"]
            if failed:
                raise Stalled(f"probe Pod {namespace}/{name} (RuntimeClass {runtime_class}) on {node}: "
                              f"no sandbox: {in_one_line(failed[-1])}")
            last = max(events, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp, default=None)
            return False, f"phase {phase}" + (f", its last event {last.reason}: {in_one_line(last.message or '')}" if last else "")
        wait(f"probe Pod {namespace}/{name} (RuntimeClass {runtime_class}) to run on {node}", ran, deadline_s, say)
    finally:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException:
            pass  # gone already; its deadline ends it otherwise


def _now() -> datetime:
    return datetime.now(timezone.utc)


def lock(api: client.ApiClient, namespace: str, holder: str):
    """Take the repair's Lease (``gpuop-fleet-repair`` in ``namespace``), or refuse by name where
    another run holds it and renewed it within ``LEASE_S``; a dead run's is taken over."""
    coordination = client.CoordinationV1Api(api)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": LEASE_S, "acquireTime": _now(), "renewTime": _now()}
    try:
        coordination.create_namespaced_lease(namespace, {"metadata": {"name": LEASE}, "spec": spec})
        return
    except ApiException as e:
        if e.status != 409:
            raise
    held = coordination.read_namespaced_lease(LEASE, namespace)
    renewed = held.spec.renew_time or held.spec.acquire_time
    age = (_now() - renewed).total_seconds() if renewed else LEASE_S + 1
    if (held.spec.holder_identity not in (None, "", holder) and age < (held.spec.lease_duration_seconds or LEASE_S)
            and not dead_holder(held.spec.holder_identity)):
        raise Stalled(f"another repair runs on this cluster: Lease {namespace}/{LEASE} is held by "
                      f"{held.spec.holder_identity}, renewed {age:.0f}s ago (it is free once not renewed for "
                      f"{held.spec.lease_duration_seconds or LEASE_S}s)")
    held.spec = client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=LEASE_S,
                                   acquire_time=_now(), renew_time=_now())
    coordination.replace_namespaced_lease(LEASE, namespace, held)  # its resourceVersion: a race loses with 409


def holder_of(host: str, pid: int) -> str:
    """A run's name in the Lease: ``holder_of("ops-1", 4242) -> "gpuop on ops-1 pid 4242"``."""
    return f"gpuop on {host} pid {pid}"


def dead_holder(holder: str) -> bool:
    """Whether the Lease's holder is a run on this machine whose process is gone (killed): its
    Lease is taken over at once, not after it expires."""
    words = holder.split()
    if len(words) != 5 or words[:1] != ["gpuop"] or words[2] != socket.gethostname() or not words[4].isdigit():
        return False
    return not os.path.exists(f"/proc/{words[4]}")


def renew(api: client.ApiClient, namespace: str):
    client.CoordinationV1Api(api).patch_namespaced_lease(LEASE, namespace, {"spec": {"renewTime": _now()}})


def unlock(api: client.ApiClient, namespace: str, holder: str):
    """Give the Lease back, where this run holds it."""
    coordination = client.CoordinationV1Api(api)
    try:
        held = coordination.read_namespaced_lease(LEASE, namespace)
        if held.spec.holder_identity == holder:
            coordination.delete_namespaced_lease(LEASE, namespace)
    except ApiException as e:
        if e.status != 404:
            raise
