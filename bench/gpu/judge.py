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

from gpuop.judgment.gpuproof import HANDLER, NAMESPACE, NODE, PROBE_IMAGE, STAGES, judged_stage, observed, stage_objects
from gpuop.outputs.tables import columns
from gpuop.reach.node_read import parse


def probe_pod() -> dict:
    """The repair's probe Pod (``drain.probe_manifest``) as the proof runs it: one GPU asked,
    through the GPU handler's RuntimeClass, named as proof.sh names its sandbox."""
    from gpuop.repair.probe import probe_manifest  # the kubernetes client: only where the probe is asked for

    pod = probe_manifest(NODE, HANDLER, PROBE_IMAGE, NAMESPACE, 120, gpus=1)
    pod["metadata"]["name"] = "gpuop-probe"
    return {**pod, "status": {"phase": "Running"}}


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
            seen = observed(f.read())
        judged.append(judged_stage(stage, parse(read_lines), seen, stage_objects(stage, probe_pod())))
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
