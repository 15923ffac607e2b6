"""A node out of service and back, through the API server, as ``kubectl cordon``, ``drain
--ignore-daemonsets`` and ``uncordon`` do, with what the fleet repair adds: a cordon marked as
gpuop's (a node someone else cordoned is never uncordoned by gpuop), and the kubelet's heartbeats
that prove a node came back. Every wait has a deadline, says where it is every ``PROGRESS_S``, and
ends in ``Stalled``: one sentence naming what was waited for and the last state seen. The probe Pod
is ``gpuop.repair.probe``'s, the repair's lock ``gpuop.repair.lease``'s.

    core = client.CoreV1Api(api_client("", "prod"))
    ours = cordon(core, "gpu-a", "gpuop on ops-1")   # False: someone else cordoned it
"""

import time

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.knobs import DrainPolicy
from gpuop.reach.kubeapi import in_words, plain
from gpuop.repair.plan import CORDONED_BY, REPAIR_FAILED
from gpuop.repair.pods import drainable, local_storage

PROGRESS_S = 10  # a wait says where it is this often
POLL_S = 1  # how often a wait asks again


class Stalled(Exception):
    """A step that did not happen: what was waited for, and the last state seen, in one sentence."""


def api_away(e: Exception) -> bool:
    """Whether a failed request is the API server away (refused, timed out, unavailable), as on a
    k3s or RKE2 server node while its restart takes the API server down with the runtime: worth
    asking again until the wait's deadline, unlike a refusal of the request itself."""
    if isinstance(e, ApiException):
        return e.status in (429, 500, 502, 503, 504)
    return isinstance(e, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def wait(what: str, probe, deadline_s: float, say, api_retry_s: float = 0) -> object:
    """Ask ``probe()`` -> (done, last state in words) until done; say the state every PROGRESS_S.
    With ``api_retry_s``, a request the API server does not answer (``api_away``) is the state
    seen, asked again until the deadline."""
    start = time.monotonic()
    said = start
    while True:
        try:
            done, state = probe()
        except Exception as e:
            if not api_retry_s or not api_away(e):
                raise
            done, state = False, f"the API server did not answer ({in_words(e, api_retry_s)}); asked again"
        if done:
            return done
        now = time.monotonic()
        if now - start >= deadline_s:
            raise Stalled(f"{what}: not within {deadline_s:.0f}s; last seen: {state}")
        if now - said >= PROGRESS_S:
            said = now
            say(f"waiting for {what} ({now - start:.0f}s): {state}")
        time.sleep(POLL_S)


def heartbeats(api: client.ApiClient, node: str, found: client.V1Node | None = None) -> tuple:
    """The kubelet's last two heartbeats on ``node``, as its own clock wrote them: its Ready
    condition's ``lastHeartbeatTime`` and its Lease's ``renewTime`` (kube-node-lease, renewed every
    10 s by default, where the status is posted only on a change or every 5 min); None where absent.
    ``found``: the Node where the caller has just read it (one request fewer).

        heartbeats(api, "gpu-a")   # (datetime(2026, 12, 4, 22, 0, 3), datetime(2026, 12, 4, 22, 0, 9))
    """
    found = found or client.CoreV1Api(api).read_node(node)
    ready = next((c for c in found.status.conditions or [] if c.type == "Ready"), None)
    try:
        renewed = client.CoordinationV1Api(api).read_namespaced_lease(node, "kube-node-lease").spec.renew_time
    except ApiException as e:
        if e.status != 404:
            raise
        renewed = None
    return (ready.last_heartbeat_time if ready else None, renewed)


def heard_since(before: tuple, now: tuple) -> bool:
    """Whether the kubelet beat after ``before`` (``heartbeats`` before a restart): either of its
    heartbeats later than the same one then, so a Ready status from before it is never taken as proof.

        heard_since((t0, t1), (t0, t2))   # True where t2 > t1
    """
    return any(n is not None and (b is None or n > b) for b, n in zip(before, now))


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


def gpuop_cordon(core: client.CoreV1Api, node: str) -> tuple:
    """``(whether gpuop's cordon is on node, the failure an earlier run marked it with or "")``: a
    run that stopped or died left the cordon; one that failed on the node left its mark too.

        gpuop_cordon(core, "gpu-a") -> (True, "CRI: containerd on gpu-a to restart ...: not within 120s; ...")
    """
    found = core.read_node(node)
    annotations = found.metadata.annotations or {}
    ours = bool(found.spec.unschedulable) and CORDONED_BY in annotations
    return ours, annotations.get(REPAIR_FAILED, "") if ours else ""


def uncordon(core: client.CoreV1Api, node: str):
    """Put ``node`` back in service and drop gpuop's marks (call only where gpuop cordoned it)."""
    core.patch_node(
        node, {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDONED_BY: None, REPAIR_FAILED: None}}}
    )


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
        terms += (
            [
                f"{e.key} {e.operator.lower()} ({','.join(e.values or [])})"
                if e.values
                else (e.key if e.operator == "Exists" else f"!{e.key}")
                for e in (selector.match_expressions or [])
            ]
            if selector
            else []
        )
        if core.list_namespaced_pod(ns, label_selector=",".join(terms), field_selector=f"metadata.name={name}").items:
            found.append(
                f"{ns}/{pdb.metadata.name} (disruptions allowed: "
                f"{(pdb.status.disruptions_allowed if pdb.status else 0) or 0})"
            )
    return found


def _refusals(pods: list, policy: DrainPolicy) -> list:
    """Why the drain would not start, as ``kubectl drain`` decides before any eviction: Pods no
    controller owns, and Pods with ``emptyDir`` data, unless ``policy`` says to delete them."""
    refused = []
    unmanaged = [p for p in pods if drainable(p) == "unmanaged"]
    if unmanaged and not policy.delete_unmanaged:
        names = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in unmanaged)
        refused.append(
            f"Pod(s) {names} are owned by no controller, so nothing would bring them back "
            "(drain_unmanaged=true deletes them, as kubectl drain --force does)"
        )
    local = [p for p in pods if drainable(p) != "stays" and local_storage(p)]
    if local and not policy.delete_emptydir_data:
        names = ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} (emptyDir {', '.join(local_storage(p))})"
            for p in local
        )
        refused.append(
            f"Pod(s) {names} have local data an eviction deletes (drain_delete_emptydir_data=true "
            "evicts them, as kubectl drain --delete-emptydir-data does)"
        )
    return refused


def _evict(api: client.ApiClient, pod: dict, node: str, deadline_s: float, say) -> None:
    """``pod`` evicted through the Eviction API, retried while a PodDisruptionBudget allows no
    disruption, within ``deadline_s``; one already gone is evicted."""
    core = client.CoreV1Api(api)
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))

    def evicted():
        try:
            core.create_namespaced_pod_eviction(name, ns, body)
            return True, ""
        except ApiException as e:
            if e.status == 404:
                return True, ""
            if e.status == 429:  # a PodDisruptionBudget allows no disruption now
                budgets = _blocking_budgets(api, pod)
                return (
                    False,
                    f"Pod {ns}/{name} held by PodDisruptionBudget {', '.join(budgets) or '(one of its namespace)'}",
                )
            raise

    wait(f"the eviction of Pod {ns}/{name} from {node}", evicted, deadline_s, say)


def drain(api: client.ApiClient, node: str, policy: DrainPolicy, say) -> list:
    """Every Pod a controller owns on ``node`` evicted through the Eviction API, PodDisruptionBudgets
    honoured, and gone within ``policy.timeout_s``; DaemonSet and mirror Pods stay. Before any
    eviction, as ``kubectl drain`` decides: a Pod no controller owns stops the drain (``Stalled``,
    naming it) unless ``policy.delete_unmanaged`` deletes it, as ``--force`` does; a Pod with
    ``emptyDir`` data, which an eviction deletes, stops it unless ``policy.delete_emptydir_data``, as
    ``--delete-emptydir-data``. Returns the Pods evicted or deleted (``namespace/name``).

        drain(api, "gpu-a", knobs.drain_policy, logger.info) -> ["ml/train-7d9f-x2"]
    """
    deadline_s = policy.timeout_s
    core = client.CoreV1Api(api)
    pods = [plain(api, p) for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items]
    refused = _refusals(pods, policy)
    if refused:
        raise Stalled(f"drain of {node}: {'; '.join(refused)}")
    leaving = [p for p in pods if drainable(p) in ("evict", "unmanaged")]
    start = time.monotonic()
    for p in leaving:
        if drainable(p) == "unmanaged":
            core.delete_namespaced_pod(p["metadata"]["name"], p["metadata"]["namespace"])
        else:
            _evict(api, p, node, deadline_s - (time.monotonic() - start), say)
    uids = {p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in leaving}
    # and the Pods already terminating there (deleted by someone else): gone too before the restart
    waited = {
        **uids,
        **{
            p["metadata"]["uid"]: f"{p['metadata']['namespace']}/{p['metadata']['name']} (terminating)"
            for p in pods
            if p["metadata"].get("deletionTimestamp")
        },
    }

    def gone():
        left = [
            waited[p.metadata.uid]
            for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            if p.metadata.uid in waited
        ]
        return not left, f"{len(left)} Pod(s) still on it: {', '.join(sorted(left))}"

    wait(
        f"the evicted and terminating Pods to leave {node}",
        gone,
        max(1.0, deadline_s - (time.monotonic() - start)),
        say,
    )
    return sorted(uids.values())
