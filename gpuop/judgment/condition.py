"""The node agent's word on its node, in node-problem-detector's contract: two Node conditions,
``PROBLEM`` (the node fails its GPU work now) and ``RESTART_UNSAFE`` (the runtime's next start, a
restart or a reboot, would break it), each True where the judgment finds a gap of its own
(``condition_type``: every gap kind sets exactly one), False where it finds none, Unknown where
it is not known; its reason its worst gap's kind in CamelCase, its message its gaps' sentences,
bounded. ``lastTransitionTime`` moves only when the status does; a change of status or reason is
written at once, a new message alone rides the next heartbeat, and an unchanged condition is
refreshed every heartbeat (``REFRESH_S`` unless the agent is told another): the kubelet's and
node-problem-detector's rule, so a node's writes do not follow its gaps' words.

    problem, restart = conditions_of(judge(view, objects, "gpu-a"), "")
    now, why = next_condition(old, problem, datetime.now(timezone.utc))   # why: "changed", "refreshed" or ""
"""

import re
from datetime import datetime

from gpuop.judgment.cluster import allocatable_count
from gpuop.judgment.driver_rules import NEXT_BOOT
from gpuop.judgment.view import LIVE

PROBLEM = "gpuop.io/GPURuntimeProblem"  # the node fails its GPU work now (True: a problem, as NPD's)
RESTART_UNSAFE = "gpuop.io/GPURuntimeRestartUnsafe"  # the runtime's next start (a restart, a reboot) would break it
CONDITIONS = (PROBLEM, RESTART_UNSAFE)
GATE = "gpuop.io/restart-unsafe"  # the label on the agent's Pod and its Node while RESTART_UNSAFE is True
REFRESH_S = 300  # the condition's heartbeat, as node-problem-detector's (the agent's --heartbeat-s)
SKEW_S = 60  # how far a node's clock may run ahead of the reader's: a heartbeat later than that is no heartbeat
MESSAGE_MAX = 1024  # the condition's message at most (an Event's note is bounded to 1 KiB too)
# The gap kinds of the runtime's next start: what a restart or a reboot would meet. Each sets
# RESTART_UNSAFE; every other kind sets PROBLEM (docs/glossary.md's table says both, once).
NEXT_START = (
    "restart-refuses-start",
    "restart-takes-cri-down",
    "restart-drops-runtime",
    "config-unreadable",
    "lost-at-regeneration",
    "handler-gone-after-restart",
    *NEXT_BOOT,
)
WORST = (
    "restart-refuses-start",
    "no-containerd",
    "cri-down",
    "restart-takes-cri-down",
    "sandbox-fails",
    "sandbox-refuses-loaded",
    "handler-gone-after-restart",
)  # read first, in this order; the rest as found
_NONE = {
    PROBLEM: "the runtime loads what is written and gives the node's Pods what they ask",
    RESTART_UNSAFE: "a restart would start the runtime, its CRI up, with every handler and device path in use",
}


def condition_type(kind: str) -> str:
    """The condition a gap kind sets: ``RESTART_UNSAFE`` for the next start's (``NEXT_START``),
    ``PROBLEM`` for every other.

        condition_type("restart-refuses-start") -> "gpuop.io/GPURuntimeRestartUnsafe"
        condition_type("handler-not-loaded") -> "gpuop.io/GPURuntimeProblem"
    """
    return RESTART_UNSAFE if kind in NEXT_START else PROBLEM


def short(condition_type_: str) -> str:
    """A condition's type without its prefix: ``GPURuntimeProblem``, ``GPURuntimeRestartUnsafe``."""
    return condition_type_.rpartition("/")[2]


def reason_of(kind: str) -> str:
    """A gap kind as a condition's reason (CamelCase, as Kubernetes' reasons are).

    reason_of("restart-refuses-start") -> "RestartRefusesStart"
    """
    return "".join(word[:1].upper() + word[1:] for word in kind.split("-"))


def worst(gaps: list) -> list:
    """The gaps, the worst first (``WORST``), the rest in the order found."""
    return sorted(gaps, key=lambda g: WORST.index(g["kind"]) if g["kind"] in WORST else len(WORST))


def _said(gaps: list) -> str:
    return " ".join(f"[{g['kind']}] {g['detail']}" for g in gaps)


def conditions_of(entry: dict | None, unread: str) -> list:
    """The two conditions the node's judgment asks for, ``PROBLEM``'s then ``RESTART_UNSAFE``'s:
    ``entry`` is ``judge``'s (None where the node was not read), ``unread`` what kept it from
    being read. Each is True with its own gaps (``condition_type``), the worst as its reason,
    else False. Both are Unknown where the node was not read. A runtime whose own answer was
    not had (its socket gone, its CRI down, no crictl) makes ``PROBLEM`` Unknown, never False:
    what it loads is not known; ``RESTART_UNSAFE`` is then True where the next start's gaps are
    found (they come from the files and the runtime's binary, not from the daemon), else Unknown.

        conditions_of(None, "the node's read did not end within 150s")[1]["status"] -> "Unknown"
        conditions_of({"loaded_from": "cri", "gaps": []}, "")[0]["reason"] -> "NoGap"
    """
    if entry is None:
        words = _bounded(f"the node's runtime was not read: {unread}")
        return [{"type": t, "status": "Unknown", "reason": "NodeNotRead", "message": words} for t in CONDITIONS]
    live, found = entry.get("loaded_from") in LIVE, []
    for kind in CONDITIONS:
        gaps = worst([g for g in entry["gaps"] if condition_type(g["kind"]) == kind])
        if not live and (kind == PROBLEM or not gaps):
            words = f"the runtime's own answer was not had (loaded from {entry.get('loaded_from')})"
            words = _bounded(f"{words}: {_said(gaps)}") if gaps else words
            found.append({"type": kind, "status": "Unknown", "reason": "RuntimeNotAnswering", "message": words})
        elif gaps:
            said = _bounded(_said(gaps))
            found.append({"type": kind, "status": "True", "reason": reason_of(gaps[0]["kind"]), "message": said})
        else:
            found.append({"type": kind, "status": "False", "reason": "NoGap", "message": _NONE[kind]})
    return found


def with_conditions(entry: dict) -> dict:
    """A node's judgment (``judge``'s entry) with what the agent would say of it: its two
    conditions' statuses (``conditions``, by short type) and, on each gap, the condition it sets.

        with_conditions(entry)["conditions"] -> {"GPURuntimeProblem": "False", "GPURuntimeRestartUnsafe": "True"}
    """
    return {
        **entry,
        "conditions": {short(c["type"]): c["status"] for c in conditions_of(entry, "")},
        "gaps": [{**g, "condition": short(condition_type(g["kind"]))} for g in entry["gaps"]],
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
    moved only where the status did), ``refreshed`` (its heartbeat older than ``refresh_s``, or
    after ``now``: a heartbeat in the future would stop the refreshes until the clock passed it;
    written with the message as it is now, so a new message alone waits for it), or "" (nothing
    to write: ``old`` stands).

        next_condition(None, conditions_of({"loaded_from": "cri", "gaps": []}, "")[0], now)[1] -> "changed"
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
    beat = _time(old.get("lastHeartbeatTime"))
    if beat is None or beat > now or (now - beat).total_seconds() >= refresh_s:
        return written, "refreshed"
    return old, ""


def said_gaps(condition: dict) -> list:
    """The gaps a condition's message says (``[kind] detail`` each, as ``conditions_of`` writes them).

    said_gaps({"message": "[cri-down] its CRI does not answer"}) -> [{"kind": "cri-down", "detail": "its CRI does not
        answer"}]
    """
    # a kind is words joined by hyphens: a "[b]" or "map[runc:0x1]" inside a detail is no kind
    parts = re.split(r"(?:^|(?<= ))\[([a-z]+(?:-[a-z0-9]+)+)\] ", condition.get("message") or "")
    return [{"kind": kind, "detail": detail.strip()} for kind, detail in zip(parts[1::2], parts[2::2])]


def condition_in(node: dict, kind: str = PROBLEM) -> dict | None:
    """The Node's own condition of type ``kind`` (plain JSON, as the API gives it); None where it
    has none."""
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def overall(statuses: list) -> str:
    """The node's one word from its conditions' statuses: True where one is, else Unknown where
    one is (or none was said), else False.

        overall(["False", "True"]) -> "True"; overall(["False", "Unknown"]) -> "Unknown"
    """
    if "True" in statuses:
        return "True"
    return "False" if statuses and all(s == "False" for s in statuses) else "Unknown"


def agent_verdict(node: dict, now: datetime, refresh_s: float = REFRESH_S) -> dict:
    """What a Node's agent says of it, read from its conditions alone: ``agent`` is ``ok``,
    ``missing`` (no condition: no agent judged it) or ``stale`` (a heartbeat older than two of
    the agents' heartbeats, ``refresh_s``: the agent stopped; or more than ``SKEW_S`` in the
    future: stamped by a clock that cannot be the agent's, or by another writer); with ok, each condition's status
    and reason (``conditions``, by its short type), the node's one ``status`` (``overall``) and
    reason (the first True condition's, else the Problem's), and the gaps, each with the
    condition it sets.

        agent_verdict(node, now) -> {"agent": "ok", "status": "True", "reason": "SandboxFails", "gaps": [...],
            "conditions": {"GPURuntimeProblem": {"status": "True", ...}, ...}, "heartbeat_age_s": 12}
    """
    said = {kind: c for kind in CONDITIONS if (c := condition_in(node, kind)) is not None}
    if PROBLEM not in said:
        return {
            "agent": "missing",
            "status": None,
            "reason": None,
            "gaps": [],
            "conditions": {},
            "heartbeat_age_s": None,
        }
    beats = [_time(c.get("lastHeartbeatTime")) for c in said.values()]
    age = None
    if all(beats):  # the oldest heartbeat's age, or the one furthest in the future (a negative age)
        ahead = (now - max(beats)).total_seconds()
        age = round(ahead if ahead < -SKEW_S else (now - min(beats)).total_seconds())
    agent = "ok" if age is not None and -SKEW_S <= age <= 2 * refresh_s else "stale"
    first_true = next((c for c in said.values() if c["status"] == "True"), said[PROBLEM])
    return {
        "agent": agent,
        "status": overall([c["status"] for c in said.values()]),
        "reason": first_true.get("reason"),
        "gaps": [{**g, "condition": short(kind)} for kind, c in said.items() for g in said_gaps(c) if agent == "ok"],
        "conditions": {short(kind): {"status": c["status"], "reason": c.get("reason")} for kind, c in said.items()},
        "heartbeat_age_s": age,
    }


def agents_report(nodes: list, now, refresh_s: float = REFRESH_S) -> dict:
    """The fleet as its agents say it: each GPU Node (one that advertises ``nvidia.com/gpu`` or
    carries the agent's conditions) with its agent's verdict (``agent_verdict``), and the nodes whose
    agent is missing or stale, which are not judged.

        agents_report(nodes, datetime.now(timezone.utc))["unread"] -> ["gpu-b (agent missing)"]
    """
    found = {}
    for node in nodes:
        verdict = agent_verdict(node, now, refresh_s)
        if verdict["agent"] != "missing" or allocatable_count(node):
            found[node["metadata"]["name"]] = verdict
    unread = [f"{name} (agent {v['agent']}{_beat(v)})" for name, v in sorted(found.items()) if v["agent"] != "ok"]
    return {"from": "agents", "nodes": dict(sorted(found.items())), "unread": unread}


def _beat(verdict: dict) -> str:
    age = verdict["heartbeat_age_s"]
    if verdict["agent"] != "stale" or age is None:
        return ""
    return f", its last heartbeat {age}s ago" if age >= 0 else f", its last heartbeat {-age}s in the future"
