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
from datetime import UTC, datetime

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.cluster import GPU
from gpuop.judgment.containerd import in_one_line
from gpuop.reach.kubeapi import in_words
from gpuop.repair.plan import CORDONED_BY, REPAIR_FAILED, drainable, local_storage

PROGRESS_S = 10  # a wait says where it is this often
POLL_S = 1  # how often a wait asks again
LEASE = "gpuop-fleet-repair"  # the repair's lock, one per cluster
LEASE_S = 60  # a lock not renewed for this long is a dead run's (knob repair_lock_s)


class Stalled(Exception):
    """A step that did not happen: what was waited for, and the last state seen, in one sentence."""


def _plain(api: client.ApiClient, obj) -> dict:
    return api.sanitize_for_serialization(obj)


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


def drain(
    api: client.ApiClient, node: str, deadline_s: float, delete_unmanaged: bool, say, delete_emptydir_data: bool = False
) -> list:
    """Every Pod a controller owns on ``node`` evicted through the Eviction API, PodDisruptionBudgets
    honoured, and gone; DaemonSet and mirror Pods stay. Before any eviction, as ``kubectl drain``
    decides: a Pod no controller owns stops the drain (``Stalled``, naming it) unless
    ``delete_unmanaged`` deletes it, as ``--force`` does; a Pod with ``emptyDir`` data, which an
    eviction deletes, stops it unless ``delete_emptydir_data``, as ``--delete-emptydir-data``.
    Returns the Pods evicted or deleted (``namespace/name``).

        drain(api, "gpu-a", 300, False, logger.info) -> ["ml/train-7d9f-x2"]
    """
    core = client.CoreV1Api(api)
    pods = [_plain(api, p) for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items]
    refused = []
    unmanaged = [p for p in pods if drainable(p) == "unmanaged"]
    if unmanaged and not delete_unmanaged:
        names = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in unmanaged)
        refused.append(
            f"Pod(s) {names} are owned by no controller, so nothing would bring them back "
            "(drain_unmanaged=true deletes them, as kubectl drain --force does)"
        )
    local = [p for p in pods if drainable(p) != "stays" and local_storage(p)]
    if local and not delete_emptydir_data:
        names = ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} (emptyDir {', '.join(local_storage(p))})"
            for p in local
        )
        refused.append(
            f"Pod(s) {names} have local data an eviction deletes (drain_delete_emptydir_data=true "
            "evicts them, as kubectl drain --delete-emptydir-data does)"
        )
    if refused:
        raise Stalled(f"drain of {node}: {'; '.join(refused)}")
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
                    return (
                        False,
                        f"Pod {ns}/{name} held by PodDisruptionBudget {', '.join(budgets) or '(one of its namespace)'}",
                    )
                raise

        wait(f"the eviction of Pod {ns}/{name} from {node}", evicted, deadline_s - (time.monotonic() - start), say)
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


PROBE_LABEL = "gpuop.io/probe-node"  # the node a probe Pod proves: the next run removes what a killed one left


def probe_manifest(
    node: str, runtime_class: str, image: str, namespace: str, deadline_s: float, gpus: int = 0, claim: str = ""
) -> dict:
    """The probe Pod: RuntimeClass ``runtime_class``, bound to ``node`` past its cordon and taints,
    one command. ``gpus``: it asks that many ``nvidia.com/gpu`` (the device plugin's allocation);
    ``claim``: it uses that ResourceClaim (DRA), and is then left to the scheduler, which alone
    allocates a claim, pinned to ``node`` by affinity.

        probe_manifest("gpu-a", "nvidia", "busybox", "default", 120, claim="gpuop-probe-x")["spec"]["resourceClaims"]
        -> [{"name": "gpu", "resourceClaimName": "gpuop-probe-x"}]
    """
    asks = (
        {"resources": {"limits": {GPU: str(gpus)}}}
        if gpus
        else {"resources": {"claims": [{"name": "gpu"}]}}
        if claim
        else {}
    )
    placed = (
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        }
        if claim
        else {"nodeName": node}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "gpuop-probe-",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuop", PROBE_LABEL: node},
        },
        "spec": {
            **placed,
            "runtimeClassName": runtime_class,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "activeDeadlineSeconds": int(deadline_s) + 30,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", "true"],
                    **asks,
                }
            ],
        },
    }


# The kubelet's words that it will not run the probe: its sandbox refused, or the DRA driver's
# preparation of the claimed device failed.
PROBE_REFUSED = ("FailedCreatePodSandBox", "FailedPrepareDynamicResources")


def probe(
    api: client.ApiClient,
    node: str,
    runtime_class: str,
    image: str,
    namespace: str,
    deadline_s: float,
    say,
    gpus: int = 0,
    api_retry_s: float = 0,
    device_class: str = "",
):
    """A probe Pod (``probe_manifest``) runs its one command to the end on ``node``: its sandbox
    started, through the handler. ``gpus``: it asks that many GPUs of the device plugin;
    ``device_class``: it claims one device of that DeviceClass (DRA) through a ResourceClaim of
    its own, made for it. Both deleted after, whatever happened; ``Stalled`` names the kubelet's
    own event where it did not run. ``api_retry_s``: an API server away meanwhile is asked again.
    """
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    labels = {"app.kubernetes.io/managed-by": "gpuop", PROBE_LABEL: node}
    claim = ""
    if device_class:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"generateName": "gpuop-probe-", "namespace": namespace, "labels": labels},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
        }
        claim = wait(
            f"the probe's ResourceClaim of DeviceClass {device_class} created",
            lambda: (resource.create_namespaced_resource_claim(namespace, body).metadata.name, ""),
            deadline_s,
            say,
            api_retry_s,
        )
    try:
        manifest = probe_manifest(node, runtime_class, image, namespace, deadline_s, gpus, claim)
        name = wait(
            f"the probe Pod for {node} created",
            lambda: (core.create_namespaced_pod(namespace, manifest).metadata.name, ""),
            deadline_s,
            say,
            api_retry_s,
        )
        try:

            def ran():
                pod = _plain(api, core.read_namespaced_pod(name, namespace))
                phase = (pod.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Running"):
                    return True, phase
                events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
                failed = [e.message for e in events if e.reason in PROBE_REFUSED]
                # the kubelet not reaching its runtime yet (its connection backs off after an outage)
                # is no word on the handler: it tries the sandbox again, and the wait goes on
                if failed and "code = Unavailable" not in failed[-1]:
                    raise Stalled(
                        f"probe Pod {namespace}/{name} (RuntimeClass {runtime_class}) on {node}: "
                        f"no sandbox: {in_one_line(failed[-1])}"
                    )
                last = max(
                    events,
                    key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
                    default=None,
                )
                return False, f"phase {phase}" + (
                    f", its last event {last.reason}: {in_one_line(last.message or '')}" if last else ""
                )

            wait(
                f"probe Pod {namespace}/{name} (RuntimeClass {runtime_class}) to run on {node}",
                ran,
                deadline_s,
                say,
                api_retry_s,
            )
        finally:
            _deleted(lambda: core.delete_namespaced_pod(name, namespace, grace_period_seconds=0))
    finally:
        if claim:
            _deleted(lambda: resource.delete_namespaced_resource_claim(claim, namespace))


def _deleted(delete):
    """``delete()``, where the object may be gone already (its deadline ends a probe Pod otherwise)."""
    try:
        delete()
    except ApiException:
        pass


def device_class_of(api: client.ApiClient, driver: str) -> str:
    """The DeviceClass a probe claims a device of ``driver`` through: the one named after the
    driver, as NVIDIA's DRA driver installs ``gpu.nvidia.com``; "" where there is none (or no DRA).

        device_class_of(api, "gpu.nvidia.com") -> "gpu.nvidia.com"
    """
    try:
        return client.ResourceV1Api(api).read_device_class(driver).metadata.name
    except ApiException as e:
        if e.status != 404:
            raise
        return ""


def dra_objects(api: client.ApiClient, node: str) -> list:
    """The node's ResourceSlices and the cluster's ResourceClaims, plain, for ``free_devices``;
    [] where the cluster serves no DRA (resource.k8s.io/v1, Kubernetes 1.34+)."""
    resource = client.ResourceV1Api(api)
    try:
        slices = resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
        claims = resource.list_resource_claim_for_all_namespaces().items
    except ApiException as e:
        if e.status != 404:
            raise
        return []
    return [{**_plain(api, s), "kind": "ResourceSlice"} for s in slices] + [
        {**_plain(api, c), "kind": "ResourceClaim"} for c in claims
    ]


def probe_class(api: client.ApiClient, handler: str) -> str:
    """A RuntimeClass of gpuop's own for ``handler``, for a probe where no RuntimeClass maps to it
    (the node's workloads reach the handler some other way): made, or found from a run that
    stopped before deleting it. Its name."""
    name = f"gpuop-probe-{handler}"
    try:
        client.NodeV1Api(api).create_runtime_class(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuop"}},
                "handler": handler,
            }
        )
    except ApiException as e:
        if e.status != 409:
            raise
    return name


def probe_class_gone(api: client.ApiClient, name: str):
    """The probe's own RuntimeClass (``probe_class``) deleted, once the probe is over."""
    try:
        client.NodeV1Api(api).delete_runtime_class(name)
    except ApiException as e:
        if e.status != 404:
            raise


def probes_left(api: client.ApiClient, namespace: str) -> list:
    """Delete every probe Pod and probe ResourceClaim in ``namespace``: called under the repair's
    lock, where none is a live run's, they are what a killed run left. Their names."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    left = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=PROBE_LABEL).items)
    for name in left:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise
    try:
        claims = sorted(
            c.metadata.name
            for c in resource.list_namespaced_resource_claim(namespace, label_selector=PROBE_LABEL).items
        )
    except ApiException as e:
        if e.status != 404:  # no DRA served: no claim can be left
            raise
        claims = []
    for name in claims:
        _deleted(lambda: resource.delete_namespaced_resource_claim(name, namespace))
    return left + [f"ResourceClaim {c}" for c in claims]


def _now() -> datetime:
    return datetime.now(UTC)


def lock(api: client.ApiClient, namespace: str, holder: str, duration_s: int = LEASE_S) -> str:
    """Take the repair's Lease (``gpuop-fleet-repair`` in ``namespace``) for ``duration_s``, or
    refuse by name where another run holds it and renewed it within its own duration; a dead
    run's is taken over, and said: the words of what was taken over ("" where the Lease was free).

        lock(api, "default", "gpuop on ops-1 pid 42")   # "gpuop on ops-2 pid 77's, not renewed for 300s"
    """
    coordination = client.CoordinationV1Api(api)
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration_s, "acquireTime": _now(), "renewTime": _now()}
    try:
        coordination.create_namespaced_lease(namespace, {"metadata": {"name": LEASE}, "spec": spec})
        return ""
    except ApiException as e:
        if e.status != 409:
            raise
    held = coordination.read_namespaced_lease(LEASE, namespace)
    renewed = held.spec.renew_time or held.spec.acquire_time
    lasts = held.spec.lease_duration_seconds or LEASE_S
    age = (_now() - renewed).total_seconds() if renewed else lasts + 1
    if (
        held.spec.holder_identity not in (None, "", holder)
        and age < lasts
        and not dead_holder(held.spec.holder_identity)
    ):
        raise Stalled(
            f"another repair runs on this cluster: Lease {namespace}/{LEASE} is held by "
            f"{held.spec.holder_identity}, renewed {age:.0f}s ago (it is free once not renewed for {lasts}s)"
        )
    was = held.spec.holder_identity
    held.spec = client.V1LeaseSpec(
        holder_identity=holder, lease_duration_seconds=duration_s, acquire_time=_now(), renew_time=_now()
    )
    coordination.replace_namespaced_lease(LEASE, namespace, held)  # its resourceVersion: a race loses with 409
    if was in (None, "", holder):
        return ""
    return f"{was}'s, " + (
        "its process gone" if dead_holder(was) else f"not renewed for {age:.0f}s (its duration {lasts}s)"
    )


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


class LockLost(Stalled):
    """The repair's Lease is no longer this run's: another run took it, or it is gone."""


def renew(api: client.ApiClient, namespace: str, holder: str):
    """Renew the repair's Lease where ``holder`` still holds it (its resourceVersion: a change
    meanwhile loses with 409, tried again at the next renewal); ``LockLost`` where another run
    took it or it was deleted."""
    coordination = client.CoordinationV1Api(api)
    try:
        held = coordination.read_namespaced_lease(LEASE, namespace)
    except ApiException as e:
        if e.status == 404:
            raise LockLost(f"the Lease {namespace}/{LEASE} was deleted while this run held it") from None
        raise
    if held.spec.holder_identity != holder:
        raise LockLost(
            f"the Lease {namespace}/{LEASE} was taken by {held.spec.holder_identity or 'no one'} while this run held it"
        )
    held.spec.renew_time = _now()
    coordination.replace_namespaced_lease(LEASE, namespace, held)


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
