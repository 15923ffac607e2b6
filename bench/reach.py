"""Benchmark: the node audit through the cluster (reach: cluster) beside SSH, at 1, 2 and 4 real
kubelet nodes.

    .venv/bin/python bench/reach.py [ROUNDS]

Each node is a simulated node (lab/simnode.sh: its own mount, pid and UTS namespaces, its own
containerd, sshd on loopback) whose real kubelet registers it in the lab cluster; containerd
1.6.20 and 2.4.2 alternate. Per fleet size, ROUNDS audits of each reach, listed from the cluster
(a nodes file of defaults: `pyinfra nodes.py audit.py -y`, and with `--data reach=cluster`),
timed, then once more with --debug, counted. Prints medians of: wall time and the controller's
CPU (pyinfra and its children, getrusage); API requests per run (the cluster's read, from the
report, and each read Pod's own, from the connector's debug lines) and per node.
"""

import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers import fleetobjects, nodesfiles, simnodes  # noqa: E402
from tests.helpers.kube import eventually, get, kubectl  # noqa: E402
from tests.helpers.playbook import PYINFRA  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_nodes", "bench/nodes.py")
bench_nodes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_nodes)

SIZES = (1, 2, 4)
VERSIONS = ("1.6.20", "2.4.2")
_READ = re.compile(r"--> read Pod \S+ on node (\S+): (\d+) API requests so far")


def ready(name) -> bool:
    node = get(f"node/{name}")
    return bool(node) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or []
    )


def requests(log: str, report: str) -> int:
    """The run's API requests: its cluster read's, and every read Pod's (the last count per node)."""
    with open(report) as f:
        cluster = json.load(f)["cluster"]["requests"]
    per_node = {}
    for node, count in _READ.findall(log):
        per_node[node] = int(count)
    return cluster + sum(per_node.values())


def main(rounds: int):
    root = tempfile.mkdtemp(prefix="gpuop-bench-reach-")
    nodes = [
        simnodes.Node(f"reach-{i}", VERSIONS[i % 2], kubelet="unix:///run/containerd/containerd.sock", registered=True)
        for i in range(max(SIZES))
    ]
    with simnodes.running(nodes, root) as key:
        for n in nodes:
            eventually(f"node {n.name} Ready", lambda: ready(n.name), timeout=180)
        for size in SIZES:
            chosen = nodes[:size]
            fleetobjects.create_cluster_objects(chosen)  # only these advertise GPUs: the cluster lists them
            for n in nodes[size:]:
                kubectl(
                    "patch",
                    "node",
                    n.name,
                    "--subresource=status",
                    "--type=json",
                    "-p",
                    '[{"op":"remove","path":"/status/capacity/nvidia.com~1gpu"},'
                    '{"op":"remove","path":"/status/allocatable/nvidia.com~1gpu"}]',
                    check=False,
                )
            path = nodesfiles.defaults_file(chosen, key, os.path.join(root, f"nodes-{size}.yaml"))
            env = {**os.environ, "GPUOP_NODES": path}
            report = os.path.join(root, "report.json")
            figures = {}
            for reach in ("ssh", "cluster"):
                args = [PYINFRA, "nodes.py", "audit.py", "-y", "--data", f"reach={reach}", "--data", f"report={report}"]
                rows = []
                for _ in range(rounds):
                    _, cpu, wall = bench_nodes.timed(args, env)
                    counted, _, _ = bench_nodes.timed(args + ["--debug"], env)
                    with open(report) as f:
                        assert len(json.load(f)["nodes"]) == size, counted.stderr[-3000:]
                    rows.append((wall, cpu, requests(counted.stderr, report)))
                figures[reach] = [statistics.median(col) for col in zip(*rows)]
            print(
                f"{size} node(s): "
                + "; ".join(
                    f"{reach}: wall {w:.2f}s, controller CPU {c:.2f}s, API requests {r:.0f} ({r / size:.1f} per node)"
                    for reach, (w, c, r) in figures.items()
                ),
                flush=True,
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
