"""Benchmark: the audit of real nodes on a simulated fleet of 1, 10 and 100 nodes, layouts mixed.

    .venv/bin/python bench/nodes.py [ROUNDS] [SIZE ...]     # default: 3 rounds of 1, 10 and 100 nodes

Each node is a simulated real node (lab/simnode.sh: its own namespaces, sshd on loopback) with a
kwok Node and a GPU Pod bound to it, laid out in turn as (LAYOUTS): systemd's containerd 1.6.20
at the default paths; systemd's 2.4.2 configured by nvidia-ctk; k3s (its multicall containerd
beside the node's own, kubelet inside the k3s process); RKE2 (its containerd, and a real kubelet
with only a --config-dir). Per fleet size,
ROUNDS audits (`pyinfra nodes.py audit.py -y`, timed; then again with --debug, counted), and
prints medians of:
- cluster reads per run, counted by the API server itself (its LIST requests of the kinds the
  audit reads, from /metrics, before and after), and the audit's own count;
- commands per node on the targets (pyinfra's --debug lines);
- the controller's CPU (pyinfra and its children, getrusage), wall time and peak memory (the
  largest resident set of the run's processes), and the floor of the same fleet: an empty deploy
  (no operation) over the same SSH hosts, in the same round;
- the controller's CPU per added node: the slope of CPU against fleet size (least squares over
  the sizes), audit and floor; and from it, 1,000 and 10,000 nodes on paper.
Target: 1 cluster read, 1 command per node, under 30 ms of controller CPU per added node.
"""

import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers import fleetobjects, layouts, nodesfiles, simnodes  # noqa: E402
from tests.helpers.kube import kubectl  # noqa: E402
from tests.helpers.playbook import PYINFRA, target_commands  # noqa: E402

SIZES = (1, 10, 100)
LAYOUTS = (
    ("systemd 1.6.20", lambda name: simnodes.Node(name, "1.6.20")),
    ("systemd 2.4.2 + nvidia-ctk", lambda name: simnodes.Node(name, "2.4.2", before=[layouts.nvidia_ctk_configure()])),
    ("k3s", lambda name: simnodes.Node(name, "1.7.35", after=layouts.k3s("2.4.2"))),
    (
        "RKE2",
        lambda name: simnodes.Node(
            name,
            "1.7.35",
            after=layouts.rke2_containerd("2.4.2"),
            kubelet=f"unix://{layouts.K3S_SOCKET}",
            kubelet_layout="rke2",
        ),
    ),
)
LISTED = ("nodes", "pods", "runtimeclasses", "daemonsets", "resourceclaims", "resourceslices")
_LIST = re.compile(r"^apiserver_request_total\{(.*)\} (\S+)$")


def list_requests() -> float:
    """LIST requests the API server has served for the kinds the audit reads."""
    total = 0.0
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        m = _LIST.match(line)
        if m and 'verb="LIST"' in m.group(1) and re.search(f'resource="({"|".join(LISTED)})"', m.group(1)):
            total += float(m.group(2))
    return total


# Runs a command and says, last on stderr, the peak resident set (KiB) of it and its children.
_PEAK = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print(f'peak-rss {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def timed(args, env) -> tuple:
    """The run, its CPU (seconds), wall time (seconds) and peak memory (MiB)."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _PEAK, *args], env=env, capture_output=True, text=True, timeout=900)
    wall, after = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    peak = int(proc.stderr.rstrip().rsplit("peak-rss ", 1)[1]) / 1024
    return proc, cpu, wall, peak


def main(rounds: int, sizes: tuple):
    root = tempfile.mkdtemp(prefix="gpuop-bench-nodes-")
    key, pubkey = simnodes.keypair(root)
    nodes = [LAYOUTS[i % len(LAYOUTS)][1](f"bench-{i}") for i in range(max(sizes))]
    fleetobjects.delete_cluster_objects(nodes)
    empty = os.path.join(root, "empty.py")
    with open(empty, "w") as f:
        f.write("# the floor: pyinfra connects, prepares and disconnects, with no operation\n")
    figures = {}
    try:
        started = time.monotonic()
        for n in nodes:
            simnodes.start(n, root, pubkey)
        print(f"{len(nodes)} simulated nodes started in {time.monotonic() - started:.0f}s", flush=True)
        fleetobjects.create_cluster_objects(nodes)
        for size in sizes:
            path = nodesfiles.nodes_file(nodes[:size], key, os.path.join(root, f"nodes-{size}.yaml"), {})
            env = {**os.environ, "GPUOP_NODES": path}
            rows = []
            for _ in range(rounds):
                floor, floor_cpu, floor_wall, floor_peak = timed([PYINFRA, "nodes.py", empty, "-y"], env)
                assert floor.returncode == 0, floor.stderr[-2000:]
                _, cpu, wall, peak = timed([PYINFRA, "nodes.py", "audit.py", "-y"], env)
                lists = list_requests()  # counted in a run of its own: --debug's logging costs CPU
                counted, _, _, _ = timed([PYINFRA, "nodes.py", "audit.py", "-y", "--debug"], env)
                served = list_requests() - lists
                commands = len(target_commands(counted.stderr))
                reads = counted.stderr.count("cluster read once for the fleet")
                rows.append(
                    (served / len(LISTED), reads, commands / size, cpu, wall, floor_cpu, floor_wall, peak, floor_peak)
                )
            figures[size] = [statistics.median(col) for col in zip(*rows)]
            mix = ", ".join(
                f"{sum(1 for i in range(size) if i % len(LAYOUTS) == k)} {name}"
                for k, (name, _) in enumerate(LAYOUTS)
                if k < size
            )
            print(
                f"{size:>2} node(s) ({mix}): cluster reads {figures[size][0]:.0f} (API server: "
                f"{figures[size][0] * len(LISTED):.0f} LIST requests), audit's own count {figures[size][1]:.0f}; "
                f"commands per node {figures[size][2]:.0f}; controller CPU {figures[size][3]:.2f}s "
                f"(floor {figures[size][5]:.2f}s), wall {figures[size][4]:.2f}s (floor {figures[size][6]:.2f}s), "
                f"peak memory {figures[size][7]:.0f} MiB (floor {figures[size][8]:.0f} MiB); per node: CPU "
                f"{figures[size][3] / size * 1000:.0f} ms (floor {figures[size][5] / size * 1000:.0f} ms), "
                f"memory {figures[size][7] / size:.1f} MiB",
                flush=True,
            )
        if len(sizes) > 1:
            fit = {col: statistics.linear_regression(sizes, [figures[n][col] for n in sizes]) for col in (3, 5, 7)}
            added, floor_added, memory = fit[3].slope * 1000, fit[5].slope * 1000, fit[7].slope
            print(
                f"per added node (least squares over {', '.join(map(str, sizes))} nodes): controller CPU audit "
                f"{added:.0f} ms, floor {floor_added:.0f} ms; peak memory {memory:.2f} MiB"
            )
            for n in (1000, 10000):
                print(
                    f"on paper, {n:,} nodes: controller CPU {(fit[3].intercept + fit[3].slope * n):.0f}s of one core, "
                    f"peak memory {(fit[7].intercept + fit[7].slope * n):.0f} MiB"
                )
    finally:
        for n in nodes:
            if n.dir:
                simnodes.stop(n)
        fleetobjects.delete_cluster_objects(nodes)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, tuple(int(a) for a in sys.argv[2:]) or SIZES)
