"""The node agent's word on its node, in node-problem-detector's contract: one Node condition
(``CONDITION``), True where the judgment finds a gap (a problem), False where it finds none,
Unknown where the node could not be read; its reason the worst gap's kind in CamelCase, its
message the gaps' sentences, bounded. ``lastTransitionTime`` moves only when the status does; a
change is written at once, an unchanged condition refreshed every ``REFRESH_S``.

    wanted = condition_of(judge(view, objects, "gpu-a"), "")
    now, why = next_condition(old, wanted, datetime.now(timezone.utc))   # why: "changed", "updated", "refreshed" or ""
"""

import re
from datetime import datetime

from gpuop.judgment.cluster import allocatable_count
from gpuop.judgment.view import LIVE

CONDITION = "gpuop.io/GPURuntimeProblem"  # the Node condition's type (True: a problem, as NPD's)
REFRESH_S = 300  # an unchanged condition's heartbeat, as node-problem-detector's
MESSAGE_MAX = 1024  # the condition's message at most (an Event's note is bounded to 1 KiB too)
WORST = (
    "restart-refuses-start",
    "no-containerd",
    "cri-down",
    "restart-takes-cri-down",
    "sandbox-fails",
    "sandbox-refuses-loaded",
    "handler-gone-after-restart",
)  # read first, in this order; the rest as found


def reason_of(kind: str) -> str:
    """A gap kind as a condition's reason (CamelCase, as Kubernetes' reasons are).

    reason_of("restart-refuses-start") -> "RestartRefusesStart"
    """
    return "".join(word[:1].upper() + word[1:] for word in kind.split("-"))


def worst(gaps: list) -> list:
    """The gaps, the worst first (``WORST``), the rest in the order found."""
    return sorted(gaps, key=lambda g: WORST.index(g["kind"]) if g["kind"] in WORST else len(WORST))


def condition_of(entry: dict | None, unread: str) -> dict:
    """The condition the node's judgment asks for: ``entry`` is ``judge``'s (None where the node
    was not read), ``unread`` what kept it from being read. A runtime whose own answer was not had
    (its socket gone, its CRI down, no crictl) is Unknown, never False: what it loads is not known.

        condition_of(None, "the node's read did not end within 150s")["status"] -> "Unknown"
        condition_of({"loaded_from": "cri", "gaps": []}, "")["reason"] -> "NoGap"
    """
    if entry is None:
        return {
            "type": CONDITION,
            "status": "Unknown",
            "reason": "NodeNotRead",
            "message": _bounded(f"the node's runtime was not read: {unread}"),
        }
    gaps = worst(entry["gaps"])
    if entry.get("loaded_from") not in LIVE:
        return {
            "type": CONDITION,
            "status": "Unknown",
            "reason": "RuntimeNotAnswering",
            "message": _bounded(
                f"the runtime's own answer was not had (loaded from {entry.get('loaded_from')}): "
                + " ".join(f"[{g['kind']}] {g['detail']}" for g in gaps)
            ),
        }
    if not gaps:
        return {
            "type": CONDITION,
            "status": "False",
            "reason": "NoGap",
            "message": "the runtime loads what is written, and a restart would load it too",
        }
    return {
        "type": CONDITION,
        "status": "True",
        "reason": reason_of(gaps[0]["kind"]),
        "message": _bounded(" ".join(f"[{g['kind']}] {g['detail']}" for g in gaps)),
    }


def _bounded(message: str) -> str:
    return message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."


def _time(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def next_condition(old: dict | None, wanted: dict, now: datetime, refresh_s: float = REFRESH_S) -> tuple:
    """The condition to write over ``old`` (the Node's, None where it has none), and why:
    ``changed`` (its status or reason moved: written at once, an Event said, ``lastTransitionTime``
    moved only where the status did), ``updated`` (its message alone moved: written at once),
    ``refreshed`` (unchanged, its heartbeat older than ``refresh_s``), or "" (nothing to write).

        next_condition(None, condition_of({"loaded_from": "cri", "gaps": []}, ""), now)[1] -> "changed"
    """
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    moved = old is None or old.get("status") != wanted["status"]
    written = {
        **wanted,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp if moved else old.get("lastTransitionTime") or stamp,
    }
    if moved or old.get("reason") != wanted["reason"]:
        return written, "changed"
    if old.get("message") != wanted["message"]:
        return written, "updated"
    beat = _time(old.get("lastHeartbeatTime"))
    if beat is None or (now - beat).total_seconds() >= refresh_s:
        return written, "refreshed"
    return old, ""


def said_gaps(condition: dict) -> list:
    """The gaps a condition's message says (``[kind] detail`` each, as ``condition_of`` writes them).

    said_gaps({"message": "[cri-down] its CRI does not answer"}) -> [{"kind": "cri-down", "detail": "its CRI does not
        answer"}]
    """
    # a kind is words joined by hyphens: a "[b]" or "map[runc:0x1]" inside a detail is no kind
    parts = re.split(r"(?:^|(?<= ))\[([a-z]+(?:-[a-z0-9]+)+)\] ", condition.get("message") or "")
    return [{"kind": kind, "detail": detail.strip()} for kind, detail in zip(parts[1::2], parts[2::2])]


def condition_in(node: dict) -> dict | None:
    """The Node's own ``CONDITION`` (plain JSON, as the API gives it); None where it has none."""
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == CONDITION), None)


def agent_verdict(node: dict, now: datetime, refresh_s: float = REFRESH_S) -> dict:
    """What a Node's agent says of it, read from its condition alone: ``agent`` is ``ok``,
    ``missing`` (no condition: no agent judged it) or ``stale`` (its heartbeat older than two
    refreshes: the agent stopped); with ok, the condition's status, reason and gaps.

        agent_verdict(node, now) -> {"agent": "ok", "status": "True", "reason": "SandboxFails", "gaps": [...],
            "heartbeat_age_s": 12}
    """
    condition = condition_in(node)
    if condition is None:
        return {"agent": "missing", "status": None, "reason": None, "gaps": [], "heartbeat_age_s": None}
    beat = _time(condition.get("lastHeartbeatTime"))
    age = round((now - beat).total_seconds()) if beat else None
    agent = "ok" if age is not None and age <= 2 * refresh_s else "stale"
    return {
        "agent": agent,
        "status": condition["status"],
        "reason": condition.get("reason"),
        "gaps": said_gaps(condition) if agent == "ok" else [],
        "heartbeat_age_s": age,
    }


def agents_report(nodes: list, now) -> dict:
    """The fleet as its agents say it: each GPU Node (one that advertises ``nvidia.com/gpu`` or
    carries the agent's condition) with its agent's verdict (``agent_verdict``), and the nodes whose
    agent is missing or stale, which are not judged.

        agents_report(nodes, datetime.now(timezone.utc))["unread"] -> ["gpu-b (agent missing)"]
    """
    found = {}
    for node in nodes:
        verdict = agent_verdict(node, now)
        if verdict["agent"] != "missing" or allocatable_count(node):
            found[node["metadata"]["name"]] = verdict
    unread = [
        f"{name} (agent {v['agent']}"
        + (f", its last heartbeat {v['heartbeat_age_s']}s ago)" if v["agent"] == "stale" else ")")
        for name, v in sorted(found.items())
        if v["agent"] != "ok"
    ]
    return {"from": "agents", "nodes": dict(sorted(found.items())), "unread": unread}
