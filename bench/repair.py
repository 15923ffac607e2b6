"""Benchmark: the fleet repair (``pyinfra nodes.py fix.py``) of 1 and 3 nodes, by phase.

    .venv/bin/python bench/repair.py [SIZE[xAT_ONCE] ...]   # default: 1, 3 and 3x3
    REPAIR_LOCK_S=6 .venv/bin/python bench/repair.py 1      # the Lease's timer seen at work (a renewal every 2 s)

Each node is a simulated real node with a real kubelet registered in the lab cluster
(lab/simnode.sh, as tests/nodes/test_node_repair.py makes them): containerd 1.6.20 with the
incident's drop-in written after its start (the file is rewritten, then it restarts), supervised
as systemd's Restart=always (its restart command kills it), a Deployment's GPU Pod pinned to it.
Per size: one repair, timed whole, each node's time per phase read from the run's own report
(``phases_s``: cordon, drain, write, forecast, restart, CRI, Ready, probe, uncordon), beside the
floor of the same fleet in the same round (an empty deploy over the same SSH hosts); then the
rerun on the repaired fleet (nothing to do); SIZExAT_ONCE repairs with repair_max_unavailable
AT_ONCE (default 1); the repair lock's renewals per minute (its own timer: every third of
repair_lock_s, the report's ``lock_renewals`` over the run's time); and on paper, 1,000 nodes at
1, 10 and 100 at once.
Run it with the lab up (``make lab-up``); it uses the current kube context.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tomli_w  # noqa: E402

from gpuop.judgment.configs import nvidia_dropin  # noqa: E402
from tests.helpers import nodesfiles, simnodes  # noqa: E402
from tests.helpers.kube import eventually, kubectl  # noqa: E402
from tests.helpers.layouts import DROPIN, write_file  # noqa: E402
from tests.helpers.playbook import PYINFRA  # noqa: E402
from tests.nodes.test_node_repair import RESTART, ready, workloads  # noqa: E402

PHASES = ("cordon", "drain", "write", "forecast", "restart", "CRI", "Ready", "probe", "uncordon")


def timed(*args, env) -> float:
    started = time.monotonic()
    done = subprocess.run([PYINFRA, *args], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"bench/repair: {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def one_size(size: int, at_once: int, root: str) -> dict:
    nodes = [
        simnodes.Node(
            f"bench-fix-{i}",
            "1.6.20",
            after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))],
            kubelet="unix:///run/containerd/containerd.sock",
            registered=True,
            supervised=True,
            nvidia_runtime=True,
            knobs=RESTART,
        )
        for i in range(size)
    ]
    with simnodes.running(nodes, root) as key:
        for n in nodes:
            eventually(f"node {n.name} Ready", lambda: ready(n.name), timeout=180)
        kubectl("apply", "-f", "-", stdin=workloads(nodes))
        path = nodesfiles.nodes_file(nodes, key, os.path.join(root, "nodes.yaml"), {n.name: n.name for n in nodes})
        env = {**os.environ, "GPUOP_NODES": path}
        report, empty = os.path.join(root, "repair.json"), os.path.join(root, "empty.py")
        with open(empty, "w") as f:
            f.write("# the floor: pyinfra connects, prepares and disconnects, with no operation\n")
        floor = timed("nodes.py", empty, "-y", env=env)
        lock = ["--data", f"repair_lock_s={os.environ['REPAIR_LOCK_S']}"] if os.environ.get("REPAIR_LOCK_S") else []
        whole = timed(
            "nodes.py",
            "fix.py",
            "-y",
            "--data",
            f"report={report}",
            "--data",
            f"repair_max_unavailable={at_once}",
            *lock,
            env=env,
        )
        with open(report) as f:
            doc = json.load(f)
        rerun = timed("nodes.py", "fix.py", "-y", env=env)
        kubectl("delete", "namespace", "gpuop-fleet", "--ignore-not-found", "--wait=false")
    phases = {p: statistics.median(n["phases_s"][p] for n in doc["nodes"].values()) for p in PHASES}
    return {
        "size": size,
        "at_once": at_once,
        "whole": whole,
        "floor": floor,
        "rerun": rerun,
        "phases": phases,
        "per_node": sum(phases.values()),
        "renewals_per_min": doc["lock_renewals"] / (whole / 60),
    }


def main():
    asked = [tuple(int(x) for x in (a.split("x") + ["1"])[:2]) for a in sys.argv[1:]] or [(1, 1), (3, 1), (3, 3)]
    results = [
        one_size(size, at_once, tempfile.mkdtemp(prefix=f"gpuop-bench-fix-{size}x{at_once}-", dir="/tmp"))
        for size, at_once in asked
    ]
    print(f"fleet repair, {time.strftime('%Y-%m-%d')}: seconds (median over the nodes for the phases)")
    print("| nodes | at once | whole run | floor | rerun | " + " | ".join(PHASES) + " | one node | lock renewals/min |")
    print("|---" * (7 + len(PHASES)) + "|")
    for r in results:
        print(
            f"| {r['size']} | {r['at_once']} | {r['whole']:.1f} | {r['floor']:.1f} | {r['rerun']:.1f} | "
            + " | ".join(f"{r['phases'][p]:.2f}" for p in PHASES)
            + f" | {r['per_node']:.1f} | {r['renewals_per_min']:.1f} |"
        )
    one = next(r for r in results if r["at_once"] == 1)["per_node"]
    print(
        f"on paper, 1,000 nodes ({one:.1f} s a node, this fleet's drain and restart; a real node's drain waits "
        "for its Pods' grace and its budgets): "
        + ", ".join(f"{n} at once {-(-1000 // n) * one / 3600:.2f} h" for n in (1, 10, 100))
    )


if __name__ == "__main__":
    main()
