"""What the scheduler says: PodScheduled conditions and their messages, read with jmespath."""

import re

import jmespath

_REASON = re.compile(r"^\s*(\d+)\s+(.+?)\s*$")
_POD_SCHEDULED = jmespath.compile("status.conditions[?type=='PodScheduled'] | [0]")


def pod_scheduled(pod: dict) -> dict | None:
    """A Pod's PodScheduled condition as the API returns it, or None before the scheduler acted.

    pod_scheduled(pod) -> {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", ...}
    """
    return _POD_SCHEDULED.search(pod)


def unschedulable(pod: dict) -> bool:
    """Whether the scheduler has looked at the Pod and found no node for it."""
    cond = pod_scheduled(pod) or {}
    return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


def reasons(message: str) -> list:
    """The (node count, reason) pairs of a scheduling failure, the notes after them left out.

    reasons("0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match "
            "Pod's node affinity/selector. no new claims to deallocate, preemption: ...")
    -> [(1, "Insufficient memory"), (2, "node(s) didn't match Pod's node affinity/selector")]
    """
    if ":" not in message:
        return []
    # "<n>/<m> nodes are available: <reasons>. <what preemption or claims could do>"
    listed = message.split(":", 1)[1].split(". ", 1)[0].rstrip(".")
    found = []
    for part in listed.split(","):
        match = _REASON.match(part)
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


def slug(text: str) -> str:
    """A reason as a report word: ``Insufficient memory`` -> ``insufficient-memory``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def blocker(message: str) -> str:
    """The reason a Pod cannot be placed: the first missing resource, else the first reason.

    blocker("0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match ...")
    -> "insufficient-memory"
    """
    found = [text for _, text in reasons(message)]
    if not found:
        return slug(message) or "unschedulable"
    return slug(next((t for t in found if t.startswith("Insufficient ")), found[0]))
