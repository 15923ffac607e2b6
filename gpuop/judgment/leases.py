"""Whether the cluster's components still work, judged by the leases they renew (stdlib only:
the lab's scripts ask it too, through lab/labcluster.py).

    stalled_components(objects, ["lab-node-0"], datetime.now(timezone.utc)) -> []
"""

from datetime import datetime

# The controllers the incident needs, by the leader lease each renews in kube-system. One that
# lost its lease (an API server that stalled longer than its renew deadline) exits.
CONTROLLERS = ("kube-scheduler", "kube-controller-manager")
LEASE_GRACE_S = 5  # renewals late by less than this are load, not a dead holder


def _lease_age(lease: dict, now: datetime) -> tuple:
    """``(seconds since the lease was renewed, its duration)``; the age is None if never renewed."""
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not renewed:
        return None, spec.get("leaseDurationSeconds")
    at = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    return (now - at).total_seconds(), spec.get("leaseDurationSeconds") or 0


def stalled_components(objects: list, nodes, now: datetime, since: datetime | None = None, held: bool = False) -> list:
    """
    The lab's components that have stopped working, in words, judged by the leases they renew:
    the scheduler's and controller-manager's leader leases, and each lab node's lease (renewed by
    kwok-controller for a fake node). A lease renewed later than its duration (and a grace) ago,
    or absent, means its holder is gone: the cluster still answers, but nothing schedules, rolls
    out or deletes. With ``since``, a renewal before it counts as none: a controller that lost
    touch with the API server meanwhile (a component was down) still looks fresh for a few seconds
    before it gives its lease up and exits. With ``held``, a lease its holder gave up counts as
    none as well: a controller that failed to renew writes, on its way out, no holder, a duration
    of 1 s and the moment it gave up (client-go's release), so its lease looks fresh for a few
    seconds after it exited (the lab's own check, lab/labcluster.py; the preflight tolerates it,
    as another replica takes a released lease within seconds).

        stalled_components(objects, ["lab-node-0"], datetime.now(timezone.utc))
        -> ["kube-scheduler: its leader lease kube-system/kube-scheduler was last renewed 48s ago (duration 15s)"]
    """
    leases = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o["kind"] == "Lease"}
    wanted = [(c, ("kube-system", c), f"its leader lease kube-system/{c}") for c in CONTROLLERS]
    wanted += [
        (
            f"node {n}'s agent (kwok-controller, or its kubelet)",
            ("kube-node-lease", n),
            f"the node lease kube-node-lease/{n}",
        )
        for n in nodes
    ]
    stalled = []
    for component, key, lease_words in wanted:
        lease = leases.get(key)
        if lease is None:
            stalled.append(f"{component}: {lease_words} is absent")
            continue
        age, duration = _lease_age(lease, now)
        if held and not (lease.get("spec") or {}).get("holderIdentity"):
            when = "" if age is None else f" {age:.1f}s ago"
            stalled.append(f"{component}: {lease_words} was given up{when} (no holder)")
        elif age is None or age > duration + LEASE_GRACE_S:
            when = "never" if age is None else f"{age:.0f}s ago"
            stalled.append(f"{component}: {lease_words} was last renewed {when} (duration {duration}s)")
        elif since is not None and age > (now - since).total_seconds():
            stalled.append(
                f"{component}: {lease_words} was last renewed {age:.1f}s ago, before the "
                f"cluster was healed {(now - since).total_seconds():.1f}s ago"
            )
    return stalled
