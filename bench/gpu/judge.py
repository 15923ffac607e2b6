"""The GPU proof's judge (docs/gpu-proof.md): each stage's node read (bench/gpu/proof.sh's
OUT/STAGE/read.txt) judged by the one judgment (``rules.judge``) with the cluster objects the stage
stands for, its verdict turned into what it says the GPU does (``forecast``), and held against
what the GPU did (OUT/STAGE/observed). Prints one table; exits 1 on any disagreement, naming the
stage.

    .venv/bin/python bench/gpu/judge.py OUT                  # the table of a proof's run
    .venv/bin/python bench/gpu/judge.py OUT --swap 1-incident=2-restarted
        # a planted disagreement: stage 1's objects and GPU judged from stage 2's node read
    .venv/bin/python bench/gpu/judge.py --probe              # the repair probe, for the kit (probe.json)
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from gpuop.judgment.cluster import gpus_asked
from gpuop.judgment.containerd import release
from gpuop.judgment.objects import of_kind, ref
from gpuop.judgment.rules import judge
from gpuop.judgment.view import node_view
from gpuop.outputs.tables import columns
from gpuop.reach.node_read import parse

NODE = "gpu-node"  # proof.sh's hostname for every stage
NAMESPACE = "gpuop-proof"
HANDLER = "nvidia"
PROBE_IMAGE = "gpuop.io/gpu-probe:1"


def _pod(name: str, runtime_class: str = "", gpus: int = 0, phase: str = "Running") -> dict:
    asks = {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {}
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeName": NODE,
            **({"runtimeClassName": runtime_class} if runtime_class else {}),
            "containers": [{"name": "gpu", "image": PROBE_IMAGE, **asks}],
        },
        "status": {"phase": phase},
    }


def probe_pod() -> dict:
    """The repair's probe Pod (``drain.probe_manifest``) as the proof runs it: one GPU asked,
    through the GPU handler's RuntimeClass, named as proof.sh names its sandbox."""
    from gpuop.repair.probe import probe_manifest  # the kubernetes client: only where the probe is asked for

    pod = probe_manifest(NODE, HANDLER, PROBE_IMAGE, NAMESPACE, 120, gpus=1)
    pod["metadata"]["name"] = "gpuop-probe"
    return {**pod, "status": {"phase": "Running"}}


def stage_objects(stage: str) -> list:
    """The cluster objects stage ``stage`` stands for: a Node that advertises the GPU, the
    RuntimeClass of the GPU handler, and the stage's Pods, as proof.sh runs them.

        [ref(p) for p in of_kind(stage_objects("3-cdi"), "Pod")] -> ["gpuop-proof/cdi-pod", "gpuop-proof/plain-pod"]
    """
    gpus = {"nvidia.com/gpu": "1"}
    base = [
        {"kind": "Node", "metadata": {"name": NODE}, "status": {"capacity": gpus, "allocatable": gpus}},
        {"kind": "RuntimeClass", "metadata": {"name": HANDLER}, "handler": HANDLER},
    ]
    pods = {
        "1-incident": [_pod("gpu-pod", HANDLER, 1, "Pending")],
        "2-restarted": [_pod("gpu-pod", HANDLER, 1)],
        "3-cdi": [_pod("cdi-pod", gpus=1), _pod("plain-pod")],
        "4-cdi-off": [_pod("cdi-pod", gpus=1)],
        "5-version-4": [_pod("gpu-pod", HANDLER, 1)],
        "6-crio": [_pod("gpu-pod", HANDLER, 1, "Pending")],
        "6-crio-restarted": [_pod("gpu-pod", HANDLER, 1)],
        "7-probe": None,
    }[stage]
    return base + (pods if pods is not None else [probe_pod()])


STAGES = ("1-incident", "2-restarted", "3-cdi", "4-cdi-off", "5-version-4", "6-crio", "6-crio-restarted", "7-probe")
REFUSED = ("sandbox-fails", "sandbox-refuses-loaded")  # its sandbox is refused
WITHOUT = ("gpu-pod-cdi-off", "cdi-spec-missing", "dra-claim-cdi-off")  # its GPU request is not met


def forecast(entry: dict, pod: dict) -> str:
    """What the judgment says the GPU does for ``pod``: ``refused`` (no sandbox, or its GPU
    request refused), ``none`` (it runs without a GPU), ``gpu`` (it gets one).

        forecast({"gaps": [{"kind": "sandbox-fails", "subject": "gpuop-proof/gpu-pod"}], ...}, pod) -> "refused"
    """
    kinds = {g["kind"] for g in entry["gaps"] if g["subject"] == ref(pod)}
    if kinds & set(REFUSED):
        return "refused"
    if kinds & set(WITHOUT):
        # containerd 2.3 and later refuse a CDI request while CDI is off; earlier ones drop it
        return "refused" if entry["runtime"] == "containerd" and release(entry["version"]) >= (2, 3) else "none"
    return "gpu" if gpus_asked(pod) else "none"


def restart_forecast(entry: dict) -> str:
    """Whether the judgment says the runtime comes back from a restart (its CRI answering)."""
    return "back" if entry["cri_after_restart"] == "ok" else "not-back"


def observed(text: str) -> dict:
    """proof.sh's observed file: ``pod NAME OUTCOME WORDS`` and ``restart OUTCOME WORDS`` lines,
    as {"pods": {name: (outcome, words)}, "restart": (outcome, words) or None}.

        observed("pod gpu-pod refused no runtime\\nrestart back\\n")["pods"] -> {"gpu-pod": ("refused", "no runtime")}
    """
    found = {"pods": {}, "restart": None}
    for line in text.splitlines():
        kind, *rest = line.split(" ", 1)
        if kind == "pod" and rest:
            name, outcome, *words = rest[0].split(" ", 2) + [""]
            found["pods"][name] = (outcome, words[0].strip())
        elif kind == "restart" and rest:
            outcome, *words = rest[0].split(" ", 1) + [""]
            found["restart"] = (outcome, words[0].strip())
    return found


def judged_stage(stage: str, read_lines: list, seen: dict) -> dict:
    """One stage: its read judged with its objects, each of its Pods' forecast beside what the GPU
    did, and the restart's where one was tried; ``agrees`` where every one matches and every Pod
    that ran has its object.

        judged_stage("1-incident", read, observed(text))["agrees"] -> True
    """
    objects = stage_objects(stage)
    entry = judge(node_view(parse(read_lines)), objects, NODE, HANDLER)
    pods = {p["metadata"]["name"]: p for p in of_kind(objects, "Pod")}
    checks = []
    for name, (outcome, words) in seen["pods"].items():
        said = forecast(entry, pods[name]) if name in pods else "no object"
        checks.append((name, outcome, said, words))
    if seen["restart"]:
        checks.append(("restart", seen["restart"][0], restart_forecast(entry), seen["restart"][1]))
    agrees = bool(checks) and all(outcome == said for _, outcome, said, _ in checks)
    return {"stage": stage, "entry": entry, "checks": checks, "agrees": agrees}


def rows(judged: list) -> list:
    """The table: stage, what the GPU did, the audit's verdict (its gap kinds, loaded, after a
    restart), whether they agree."""
    head = [("stage", "what the GPU did", "the audit's verdict", "agree")]
    body = []
    for j in judged:
        e = j["entry"]
        did = "; ".join(f"{name}: {outcome}" for name, outcome, _, _ in j["checks"]) or "nothing observed"
        said = "; ".join(f"{name}: {s}" for name, _, s, _ in j["checks"])
        gaps = ",".join(sorted({g["kind"] for g in e["gaps"]})) or "no gaps"
        verdict = (
            f"{said} ({gaps}; loaded {','.join(e['loaded']) or '-'}; "
            f"after restart {e['cri_after_restart']} {','.join(e['after_restart']) or '-'})"
        )
        body.append((j["stage"], did, verdict, "yes" if j["agrees"] else "NO"))
    return columns(head + body)


def judge_run(out: str, swap: dict | None = None) -> list:
    """Every stage of a proof's run in ``out`` that has an observation, judged; ``swap``: stage ->
    the stage whose node read it is judged from instead (a planted disagreement)."""
    judged = []
    for stage in STAGES:
        seen_path = os.path.join(out, stage, "observed")
        if not os.path.exists(seen_path):
            continue
        with open(os.path.join(out, (swap or {}).get(stage, stage), "read.txt")) as f:
            read_lines = f.read().splitlines()
        with open(seen_path) as f:
            judged.append(judged_stage(stage, read_lines, observed(f.read())))
    return judged


def main(argv: list) -> int:
    if argv == ["--probe"]:
        pod = probe_pod()
        print(json.dumps({"handler": HANDLER, "command": pod["spec"]["containers"][0]["command"]}))
        return 0
    if not argv or argv[0].startswith("-") or len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--swap"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    swap = dict([argv[2].split("=", 1)]) if len(argv) == 3 else None
    judged = judge_run(argv[0], swap)
    if not judged:
        print(f"bench/gpu/judge.py: no stage observed in {argv[0]} (bench/gpu/proof.sh writes them)", file=sys.stderr)
        return 1
    run = os.path.join(argv[0], "run")
    if os.path.exists(run):
        with open(run) as f:
            print("run: " + "; ".join(line for line in f.read().splitlines() if line.strip()))
    print("\n".join(rows(judged)))
    wrong = [j["stage"] for j in judged if not j["agrees"]]
    if wrong:
        print(f"the audit's verdict and the GPU disagree in stage(s): {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
