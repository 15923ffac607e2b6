"""Benchmark: one node agent's cost (``python -m gpuop.agent``), steady and during a change, beside
the SSH fleet audit's controller cost per node.

    .venv/bin/python bench/agent.py [JUDGMENTS]     # default 30 judgments, steady then changing

One simulated node with a real kubelet registered in the lab cluster (as tests/nodes/test_agent.py
makes it: containerd 2.4.2 configured by nvidia-ctk, a Deployment's GPU Pod on it), its agent
entering its namespaces every 2 s. From the agent's own metrics (its process collector, and its
counters of judgments, of API requests by verb and of its node reads' CPU): the agent's CPU and
the node read's per judgment, resident memory, API requests per judgment (watches apart); the
same with the seed's drop-in written after containerd's start (the condition True, its message
moving as the kubelet's events come); and on paper, 10,000 nodes at the agent's default interval
(60 s): requests per second to the API server, beside the kubelets' own node status and lease
updates (a Lease renewal every 10 s per node).
Run it with the lab up (``make lab-up``); it uses the current kube context.
"""

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tomli_w  # noqa: E402

from gpuop.judgment.configs import nvidia_dropin  # noqa: E402
from tests.helpers import layouts, simnodes  # noqa: E402
from tests.helpers.kube import eventually  # noqa: E402
from tests.helpers.layouts import DROPIN  # noqa: E402
from tests.helpers.ssh import free_port  # noqa: E402
from tests.nodes.test_agent import COMMON  # noqa: E402
from tests.nodes.test_node_repair import registered  # noqa: E402

INTERVAL_S = 2


def scraped(port: int) -> dict:
    """The agent's series that count: CPU seconds, resident bytes, judgments, requests."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()

    def value(pattern):
        return sum(float(m) for m in re.findall(rf"^{pattern} (\S+)$", text, re.M))

    return {
        "cpu": value("process_cpu_seconds_total"),
        "rss": value("process_resident_memory_bytes"),
        "judgments": value("gpuop_agent_judgments_total"),
        "requests": value(r'gpuop_agent_api_requests_total\{verb="(?!WATCH)[A-Z]+"\}'),
        "watches": value(r'gpuop_agent_api_requests_total\{verb="WATCH"\}'),
        "read_cpu": value("gpuop_agent_node_read_cpu_seconds_total"),
    }


def _answers(port: int) -> bool:
    try:
        return scraped(port)["judgments"] >= 0
    except OSError:
        return False


def measured(port: int, judgments: int) -> dict:
    """Over the next ``judgments`` judgments: CPU seconds and requests per judgment, peak memory."""
    first = scraped(port)
    deadline = time.monotonic() + judgments * INTERVAL_S * 5  # a judgment that stalls ends the bench, named
    while (now := scraped(port))["judgments"] - first["judgments"] < judgments:
        if time.monotonic() > deadline:
            sys.exit(
                f"bench/agent: {judgments} judgments not made within {judgments * INTERVAL_S * 5}s; "
                f"made {now['judgments'] - first['judgments']:.0f}"
            )
        time.sleep(INTERVAL_S / 2)
    made = now["judgments"] - first["judgments"]
    return {
        "cpu_ms": 1000 * (now["cpu"] - first["cpu"]) / made,
        "requests": (now["requests"] - first["requests"]) / made,
        "watches": now["watches"] - first["watches"],
        "read_cpu_ms": 1000 * (now["read_cpu"] - first["read_cpu"]) / made,
        "rss_mib": now["rss"] / 2**20,
        "judgments": made,
    }


def main():
    judgments = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    node = simnodes.Node("bench-agent", "2.4.2", before=[layouts.nvidia_ctk_configure()], **COMMON)
    root = tempfile.mkdtemp(prefix="gpuop-bench-agent-", dir="/tmp")
    with registered([node], root), contextlib.ExitStack() as stack:
        port = free_port()
        log = stack.enter_context(open(os.path.join(root, "agent.log"), "w"))
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuop.agent",
                "--node",
                node.name,
                "--interval-s",
                str(INTERVAL_S),
                "--port",
                str(port),
                "--enter",
                f"nsenter -t {simnodes.ns_pid(node)} -m -u -p --",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(agent.wait, 30)
        stack.callback(agent.terminate)
        eventually("the agent's metrics to answer", lambda: _answers(port), timeout=60)
        measured(port, 3)  # its start: the first reads
        steady = measured(port, judgments)
        with open(f"/proc/{simnodes.ns_pid(node)}/root{DROPIN}", "w") as f:
            f.write(tomli_w.dumps(nvidia_dropin()))  # the seed's drop-in, after the runtime's start
        changing = measured(port, judgments)
    print(f"node agent, {time.strftime('%Y-%m-%d')}, one node, a judgment every {INTERVAL_S}s:")
    print(
        "| state | judgments | agent CPU per judgment | node read CPU per judgment | API requests per judgment "
        "(watches apart) | watches begun | resident memory |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, m in (("steady (no gap)", steady), ("the seed's drop-in written after the start", changing)):
        print(
            f"| {name} | {m['judgments']:.0f} | {m['cpu_ms']:.0f} ms | {m['read_cpu_ms']:.0f} ms | "
            f"{m['requests']:.2f} | {m['watches']:.0f} | {m['rss_mib']:.0f} MiB |"
        )
    reads = 10_000 * steady["requests"] / 60
    print(
        f"on paper, 10,000 nodes at the default interval (60 s): {reads:.0f} reads/s from judgments, "
        f"{10_000 / 300:.0f} heartbeat PATCHes/s (node-problem-detector's own), {10_000 * 2 / 2700:.0f} watches "
        f"taken up/s (2 per node, each every 30 to 60 min), beside the kubelets' {10_000 / 10:.0f} Lease renewals/s; "
        f"per node {3600 / 60 * (steady['cpu_ms'] + steady['read_cpu_ms']) / 1000:.1f} CPU seconds an hour "
        "(the agent's and its reads')"
    )


if __name__ == "__main__":
    main()
