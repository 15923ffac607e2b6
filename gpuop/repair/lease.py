"""The fleet repair's one-at-a-time lock: a Lease (``LEASE`` in the repair's namespace), taken,
renewed while the run lasts, given back; a dead run's taken over, said by name.

    lock(api, "default", holder_of("ops-1", 42))   # "" where it was free
"""

import os
import socket
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.repair.drain import Stalled

LEASE = "gpuop-fleet-repair"  # the repair's lock, one per cluster
LEASE_S = 60  # a lock not renewed for this long is a dead run's (knob repair_lock_s)


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
