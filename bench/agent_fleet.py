"""Benchmark: a fleet's agents against the lab's real API server, measured from the API server's
own metrics.

    .venv/bin/python bench/agent_fleet.py [--nodes 1000] [--pods 10] [--steady-s 600] [--processes 4]

The lab's kube-apiserver (the current kube context, ``make lab-up``) given ``--nodes`` kwok Nodes
(kwok's controller plays their kubelets: Lease renewals, node status) with ``--pods`` Pods on each
(one of them a GPU Pod of RuntimeClass ``nvidia``), and as many agents: the agent's own code
(``gpuop.agent.agent.Agent``: its watches, judgments, condition, heartbeat and Events), a thread
each, ``--processes`` processes in all. The only stand-in is the node's read: two reads recorded
here from a simulated node with a real containerd 2.4.2 (configured by nvidia-ctk; then with the
seed's drop-in written after its start), replayed as each agent's read, parsed each time.

Measured, each phase from ``apiserver_request_total`` (by verb and resource, over the phase),
``apiserver_longrunning_requests`` (the watches open) and the API server's CPU and memory, beside
the agents' own counters: the kwok fleet alone (the kubelets' share, subtracted from the rest),
the agents' start, ``--steady-s`` steady, a change (``--change`` of the nodes read the incident,
then read healthy again), and the minute after the API server is killed and started again. On
paper: 10,000 nodes, beside node-problem-detector (a PATCH per 5-minute heartbeat per node) and
the kubelets' Lease renewals (one per node every 10 s).
"""

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from tests.helpers.kube import apiserver_series  # noqa: E402

PREFIX = "fleet-"  # the bench's Nodes
NAMESPACE = "gpuop-fleet"  # its Pods
MARK = {"gpuop.io/fleet-bench": "true"}  # on each Node it makes: what it deletes at the end
HANDLER = "nvidia"
WORKER_SAY_S = 5  # a worker writes its agents' counters this often
STACK = 512 * 1024  # each agent's threads: mostly asleep on a socket


def log(words: str):
    print(f"[{time.strftime('%H:%M:%S')}] {words}", file=sys.stderr, flush=True)


# --- the recorded reads -------------------------------------------------------------------------


def record_reads(path: str):
    """The node's read (``gpuop.reach.node_read``, as the agent runs it) of two simulated nodes with
    a real containerd 2.4.2: healthy (configured by nvidia-ctk before its start), and the incident
    (the seed's drop-in written after its start: nvidia written, not loaded)."""
    import tomli_w

    from gpuop.judgment.configs import nvidia_dropin
    from gpuop.reach.node_read import node_read
    from tests.helpers import layouts, simnodes
    from tests.helpers.layouts import DROPIN, write_file
    from tests.nodes.test_agent import COMMON
    from tests.nodes.test_node_repair import registered

    nodes = {
        "healthy": simnodes.Node("fleet-record-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], **COMMON),
        "incident": simnodes.Node(
            "fleet-record-incident", "2.4.2", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))], **COMMON
        ),
    }
    root = tempfile.mkdtemp(prefix="gpuop-bench-fleet-", dir="/tmp")
    reads = {}
    with registered(list(nodes.values()), root):
        for state, node in nodes.items():
            enter = ["nsenter", "-t", str(simnodes.ns_pid(node)), "-m", "-u", "-p", "--"]
            done = subprocess.run(
                [*enter, "sh", "-c", node_read("crictl", 150)], capture_output=True, text=True, timeout=160
            )
            if done.returncode != 0:
                sys.exit(f"bench/agent_fleet: the simulated node's read failed: {done.stderr[-300:]}")
            reads[state] = done.stdout
    shutil.rmtree(root, ignore_errors=True)
    with open(path, "w") as f:
        json.dump(reads, f)


# --- a worker: its share of the agents, in one process ------------------------------------------


class Replayed:
    """A node's read replayed: the recorded healthy read, or the incident's while the node is
    named in the file ``changed`` (read again when it moves), parsed each time as a read is."""

    def __init__(self, reads: dict, node: str, changed: str):
        self.reads, self.node, self.changed = reads, node, changed

    def __call__(self):
        from gpuop.agent.noderead import Answer
        from gpuop.reach.node_read import parse

        try:
            with open(self.changed) as f:
                state = "incident" if self.node in f.read().split() else "healthy"
        except FileNotFoundError:
            state = "healthy"
        return Answer(parse(self.reads[state].splitlines()), "", 0.0)


def worker(names: list, state_dir: str, index: int, interval_s: float, heartbeat_s: float):
    """Agents for ``names``, a thread each, forever; their counters said every few seconds."""
    import logging

    from prometheus_client import CollectorRegistry

    from gpuop.agent.agent import Agent
    from gpuop.agent.flags import REQUEST_DEADLINE_S, parse_flags
    from gpuop.agent.metrics import Metrics
    from gpuop.judgment.condition import PROBLEM, short
    from gpuop.reach.kubeapi import bounded

    # the agents' warnings (a watch broken, and why) in a file of the worker's: counted at the end
    logging.basicConfig(level=logging.WARNING, filename=os.path.join(state_dir, f"worker-{index}.log"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threading.stack_size(STACK)
    with open(os.path.join(state_dir, "reads.json")) as f:
        reads = json.load(f)
    configuration = client.Configuration()
    config.load_kube_config(client_configuration=configuration)
    agents = []
    for name in names:
        flags = parse_flags(
            # The replayed read takes no time: its deadline the least the flags allow.
            ["--node", name, "--interval-s", str(interval_s), "--heartbeat-s", str(heartbeat_s), "--port", "0"]
            + ["--read-deadline-s", "10"]
        )
        metrics = Metrics(CollectorRegistry())
        api = metrics.counted(bounded(configuration, REQUEST_DEADLINE_S))
        agent = Agent(api, flags, metrics, read=Replayed(reads, name, os.path.join(state_dir, "changed")))
        agents.append((agent, metrics))
        threading.Thread(target=agent.run, name=f"agent-{name}", daemon=True).start()
    said = os.path.join(state_dir, f"worker-{index}.json")
    while True:
        counts = {"requests": {}, "judgments": 0, "status": {}, "synced": 0, "failures": 0}
        for agent, metrics in agents:
            for sample in metrics.requests.collect()[0].samples:
                if sample.name.endswith("_total"):
                    verb = sample.labels["verb"]
                    counts["requests"][verb] = counts["requests"].get(verb, 0) + sample.value
            counts["judgments"] += _total(metrics.judgments)
            status = next(
                (
                    s.labels["status"]
                    for s in metrics.condition.collect()[0].samples
                    if s.value == 1 and s.labels["condition"] == short(PROBLEM)
                ),
                "none",
            )
            counts["status"][status] = counts["status"].get(status, 0) + 1
            counts["synced"] += agent.synced()
            counts["failures"] += _total(metrics.failures)
        used = resource.getrusage(resource.RUSAGE_SELF)
        counts["cpu_s"], counts["rss_kib"] = used.ru_utime + used.ru_stime, used.ru_maxrss
        with open(said + ".new", "w") as f:
            json.dump(counts, f)
        os.replace(said + ".new", said)
        time.sleep(WORKER_SAY_S)


def _total(counter) -> float:
    return sum(s.value for s in counter.collect()[0].samples if s.name.endswith("_total"))


# --- the driver ---------------------------------------------------------------------------------


def delta(first: dict, last: dict) -> dict:
    """Over the time between two scrapes: requests per second by key, the API server's share of a
    core, its memory and the watches open at the end."""
    seconds = last["at"] - first["at"]
    rates = {k: (v - first["requests"].get(k, 0)) / seconds for k, v in last["requests"].items()}
    return {
        "seconds": seconds,
        "rates": {k: v for k, v in rates.items() if v > 0},
        "cpu": (last["cpu"] - first["cpu"]) / seconds,
        "rss": last["rss"],
        "watches": sum(last["watches"].values()),
    }


def workers_said(state_dir: str, processes: int) -> dict:
    total = {"requests": {}, "judgments": 0, "status": {}, "synced": 0, "failures": 0, "cpu_s": 0.0, "rss_kib": 0}
    for i in range(processes):
        try:
            with open(os.path.join(state_dir, f"worker-{i}.json")) as f:
                said = json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        for verb, n in said["requests"].items():
            total["requests"][verb] = total["requests"].get(verb, 0) + n
        for status, n in said["status"].items():
            total["status"][status] = total["status"].get(status, 0) + n
        for key in ("judgments", "synced", "failures", "cpu_s", "rss_kib"):
            total[key] += said[key]
    return total


def wait_for(what: str, probe, timeout_s: float, every_s: float = 2.0, state=None):
    """``probe()`` until truthy, saying every 30 s what it waits for and ``state()`` (the last
    state seen); past ``timeout_s`` the bench ends naming both."""
    deadline, said = time.monotonic() + timeout_s, time.monotonic()
    while True:
        seen = probe()
        if seen:
            return seen
        words = f"{what}; last seen: {state()}" if state else what
        if time.monotonic() > deadline:
            sys.exit(f"bench/agent_fleet: {words}: not within {timeout_s:.0f}s")
        if time.monotonic() - said > 30:
            log(f"waiting for {words}")
            said = time.monotonic()
        time.sleep(every_s)


def made_in_parallel(what: str, calls: list, threads: int = 8):
    """Each of ``calls`` (no argument), on ``threads`` threads; an object there already is kept."""
    started = time.monotonic()

    def one(call):
        try:
            call()
        except ApiException as e:
            if e.status != 409:
                raise

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for n, _ in enumerate(pool.map(one, calls), 1):
            if n % 2000 == 0:
                log(f"{what}: {n} of {len(calls)}")
    log(f"{what}: {len(calls)} in {time.monotonic() - started:.0f}s")


def fleet_nodes(count: int) -> list:
    from lab.labcluster import kwok_node

    return [kwok_node(f"{PREFIX}{i:04d}", labels=dict(MARK), capacity={"nvidia.com/gpu": "8"}) for i in range(count)]


def fleet_pod(node: str, i: int) -> dict:
    """One of a node's Pods; its first a GPU Pod of the handler's RuntimeClass."""
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    spec = {"nodeName": node, "containers": [container], "tolerations": [{"operator": "Exists"}]}
    if i == 0:
        spec["runtimeClassName"] = HANDLER
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{node}-{i}", "namespace": NAMESPACE},
        "spec": spec,
    }


def running_pods(core: client.CoreV1Api) -> int:
    answer = core.list_namespaced_pod(NAMESPACE, field_selector="status.phase=Running", resource_version="0")
    return len(answer.items)


def agents_rate(d: dict, base: dict) -> dict:
    """The requests per second a phase adds to the kwok fleet's own, by key (negative noise dropped)."""
    keys = set(d["rates"]) | set(base["rates"])
    added = {k: d["rates"].get(k, 0) - base["rates"].get(k, 0) for k in keys}
    return {k: v for k, v in added.items() if v > 0.005}


def said_rates(rates: dict) -> str:
    top = sorted(rates.items(), key=lambda kv: -kv[1])[:8]
    return ", ".join(f"{verb} {res}{'/' + sub if sub else ''} {v:.2f}" for (verb, res, sub, _), v in top) or "none"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=10, help="Pods per node")
    p.add_argument("--steady-s", type=float, default=600)
    p.add_argument("--baseline-s", type=float, default=120, help="the kwok fleet alone, before the agents")
    p.add_argument("--change", type=float, default=0.05, help="the share of the nodes whose read turns")
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--interval-s", type=float, default=60)
    p.add_argument("--heartbeat-s", type=float, default=300)
    p.add_argument("--keep", action="store_true", help="leave the fleet's Nodes and Pods in the cluster")
    a = p.parse_args()
    config.load_kube_config()
    api = client.ApiClient()
    core, nodeapi = client.CoreV1Api(api), client.NodeV1Api(api)
    state_dir = tempfile.mkdtemp(prefix="gpuop-bench-fleet-", dir="/tmp")
    log(f"recording the node's reads (a simulated node, containerd 2.4.2) into {state_dir}")
    record_reads(os.path.join(state_dir, "reads.json"))

    names = [f"{PREFIX}{i:04d}" for i in range(a.nodes)]
    made_rc = False
    workers = []
    try:
        try:
            nodeapi.read_runtime_class(HANDLER)
        except ApiException as e:
            if e.status != 404:
                raise
            nodeapi.create_runtime_class({"metadata": {"name": HANDLER}, "handler": HANDLER})
            made_rc = True
        made_in_parallel("Nodes", [lambda n=n: core.create_node(n) for n in fleet_nodes(a.nodes)])
        wait_for(
            f"{a.nodes} kwok Nodes Ready",
            lambda: (
                sum(
                    any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                    for n in core.list_node(label_selector="gpuop.io/fleet-bench=true").items
                )
                >= a.nodes
            ),
            600,
            5,
        )
        with contextlib.suppress(ApiException):
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        pods = [fleet_pod(n, i) for n in names for i in range(a.pods)]
        made_in_parallel("Pods", [lambda p=p: core.create_namespaced_pod(NAMESPACE, p) for p in pods])
        wait_for(
            f"{len(pods)} Pods running",
            lambda: running_pods(core) >= len(pods),
            900,
            10,
            lambda: f"{running_pods(core)} running",
        )

        log(f"the kwok fleet alone for {a.baseline_s:.0f}s")
        time.sleep(10)
        first = apiserver_series()
        time.sleep(a.baseline_s)
        base = delta(first, apiserver_series())

        log(f"{a.nodes} agents in {a.processes} processes")
        before = apiserver_series()
        share = (a.nodes + a.processes - 1) // a.processes
        for i in range(a.processes):
            part = names[i * share : (i + 1) * share]
            workers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", str(i), state_dir, str(a.interval_s), str(a.heartbeat_s)],
                    stdin=subprocess.PIPE,
                    text=True,
                )
            )
            workers[-1].stdin.write("\n".join(part))
            workers[-1].stdin.close()
        started = time.monotonic()

        def agents_state():
            """The workers' counters; a worker that exited ends the bench at once, with its code."""
            for i, w in enumerate(workers):
                if w.poll() is not None:
                    sys.exit(f"bench/agent_fleet: worker {i} exited with {w.returncode} (its words above)")
            return workers_said(state_dir, a.processes)

        def all_judged():
            said = agents_state()
            return said["synced"] >= a.nodes and said["status"].get("False", 0) >= a.nodes and said

        said = wait_for(f"{a.nodes} agents synced and judged False", all_judged, 600, 2, agents_state)
        start = delta(before, apiserver_series())
        log(f"all judged in {time.monotonic() - started:.0f}s: {said['status']}")

        log(f"steady for {a.steady_s:.0f}s")
        first, agents_first = apiserver_series(), agents_state()
        time.sleep(a.steady_s)
        last, agents_last = apiserver_series(), agents_state()
        steady = delta(first, last)

        changed = names[:: max(1, round(1 / a.change))] if a.change else []
        log(f"a change: {len(changed)} nodes read the incident, then healthy again")
        first = apiserver_series()
        change_began = time.monotonic()
        with open(os.path.join(state_dir, "changed"), "w") as f:
            f.write("\n".join(changed))
        wait_for(
            f"{len(changed)} conditions True",
            lambda: agents_state()["status"].get("True", 0) >= len(changed),
            3 * a.interval_s,
            2,
            agents_state,
        )
        turned_s = time.monotonic() - change_began
        os.remove(os.path.join(state_dir, "changed"))
        wait_for(
            f"{a.nodes} conditions False again",
            lambda: agents_state()["status"].get("False", 0) >= a.nodes,
            3 * a.interval_s,
            2,
            agents_state,
        )
        change = delta(first, apiserver_series())

        log("the API server killed and started again")
        from tests.helpers.kube import exited, heal_lab, kill_component

        pid = kill_component("kube-apiserver")
        wait_for(f"kube-apiserver pid {pid} to exit", lambda: exited(pid), 60, 0.5)
        killed = time.monotonic()
        heal_lab()
        back = wait_for("the API server's metrics", _scraped, 300)
        back_s = time.monotonic() - killed
        time.sleep(max(0.0, 60 - (time.monotonic() - back["at"])))
        # The new API server's counters begin at its start: from the kill to a minute after it answered.
        herd = delta({"requests": {}, "cpu": 0.0, "at": killed}, apiserver_series())
        wait_for(
            f"{a.nodes} agents synced again",
            lambda: agents_state()["synced"] >= a.nodes,
            300,
            2,
            agents_state,
        )
        resynced_s = time.monotonic() - killed
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.wait(30)
        if not a.keep:
            log("deleting the fleet")
            with contextlib.suppress(ApiException):
                core.delete_namespace(NAMESPACE)
            with contextlib.suppress(ApiException):
                core.delete_collection_node(label_selector="gpuop.io/fleet-bench=true")
            with contextlib.suppress(ApiException):
                core.delete_collection_namespaced_event("default", field_selector="source=gpuop-agent")
            if made_rc:
                with contextlib.suppress(ApiException):
                    nodeapi.delete_runtime_class(HANDLER)
        broken = watches_broken(state_dir, a.processes)
        shutil.rmtree(state_dir, ignore_errors=True)

    report(a, base, start, steady, agents_first, agents_last, change, turned_s, herd, back_s, resynced_s)
    print(f"watches broken over the whole run, by kind and why: {json.dumps(broken)}")


def watches_broken(state_dir: str, processes: int) -> dict:
    """How many times the agents' watches broke, by kind and why (their warnings), over the run."""
    found = {}
    for i in range(processes):
        with contextlib.suppress(OSError), open(os.path.join(state_dir, f"worker-{i}.log")) as f:
            for line in f:
                said = re.search(r"the (\w+)' watch broke: (.*?)(?: \(|;|$)", line)
                if said:
                    key = f"{said.group(1)}: {said.group(2)[:60]}"
                    found[key] = found.get(key, 0) + 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def _scraped():
    try:
        return apiserver_series()
    except Exception:  # noqa: BLE001 (the API server not back yet: asked again)
        return None


def report(a, base, start, steady, agents_first, agents_last, change, turned_s, herd, back_s, resynced_s):
    n = a.nodes
    added = agents_rate(steady, base)
    added_total = sum(added.values())
    reads = sum(v for (verb, *_), v in added.items() if verb in ("GET", "LIST"))
    agent_requests = {
        verb: agents_last["requests"].get(verb, 0) - agents_first["requests"].get(verb, 0)
        for verb in agents_last["requests"]
    }
    minutes = a.steady_s / 60
    print(
        f"agents' fleet, {time.strftime('%Y-%m-%d')}, the lab's kube-apiserver, {n} kwok Nodes, {a.pods} Pods each, "
        f"{n} agents in {a.processes} processes, interval {a.interval_s:.0f}s, heartbeat {a.heartbeat_s:.0f}s:"
    )
    print("| phase | requests/s to the API server | the agents' share | API server CPU | its memory | watches open |")
    print("|---|---|---|---|---|---|")
    rows = (
        ("the kwok fleet alone (its kubelets)", base, None),
        ("the agents' start (until all judged)", start, agents_rate(start, base)),
        (f"steady, {a.steady_s:.0f}s", steady, added),
        (f"a change on {a.change:.0%} of the nodes and back", change, agents_rate(change, base)),
        ("the first minute after an API server restart", herd, agents_rate(herd, base)),
    )
    for name, d, share in rows:
        agents = "" if share is None else f"{sum(share.values()):.2f}"
        print(
            f"| {name} | {sum(d['rates'].values()):.2f} | {agents} | {100 * d['cpu']:.0f}% of a core | "
            f"{d['rss'] / 2**20:.0f} MiB | {d['watches']:.0f} |"
        )
    print(f"kwok fleet alone, by kind: {said_rates(base['rates'])}")
    print(f"steady, the agents' share by kind: {said_rates(added)}")
    print(f"during the change, the agents' share by kind: {said_rates(agents_rate(change, base))}")
    print(f"the restart's first minute by kind: {said_rates(herd['rates'])}")
    print(
        f"steady, the agents' own counters: {json.dumps({k: round(v) for k, v in agent_requests.items()})} "
        f"over {minutes:.0f} min ({sum(v for k, v in agent_requests.items() if k != 'WATCH') / n / minutes:.2f} "
        f"requests a minute per node, watches apart; {agent_requests.get('WATCH', 0) / n / minutes:.2f} watches)"
    )
    print(
        f"steady per node: {60 * added_total / n:.2f} requests a minute to the API server "
        f"({60 * reads / n:.3f} of them reads)"
    )
    print(
        f"the change: {turned_s:.0f}s until every changed node was True; the API server back {back_s:.0f}s after "
        f"it was killed, every agent in sync again {resynced_s:.0f}s after"
    )
    # What a window shorter than a watch's life cannot count: each node's two watches taken up once
    # each ends (after WATCH_S to twice that, drawn), each node's one RuntimeClass read again
    # (after REREAD_S, drawn): at their mean rates, steady.
    from gpuop.agent.kept import REREAD_S
    from gpuop.agent.watched import WATCH_S

    renewals = 2 / (1.5 * WATCH_S)  # per node per second
    rereads = 1 / (sum(REREAD_S) / 2)
    counted_watches = sum(v for (verb, *_), v in added.items() if verb == "WATCH") / n
    paper = 10_000 / n * added_total + 10_000 * (max(0.0, renewals - counted_watches) + rereads)
    print(
        f"on paper, 10,000 nodes: the agents {10_000 / n * added_total:.1f} requests/s as measured steady "
        f"({10_000 / n * reads:.1f} reads/s), and what {a.steady_s / 60:.0f} minutes cannot count: "
        f"{10_000 * max(0.0, renewals - counted_watches):.1f} watch renewals/s (two a node, each after "
        f"{WATCH_S / 60:.0f} to {2 * WATCH_S / 60:.0f} min) and {10_000 * rereads:.1f} RuntimeClass reads/s "
        f"(each after {REREAD_S[0] / 3600:.0f} to {REREAD_S[1] / 3600:.0f} h): {paper:.1f} requests/s in all, "
        f"{10_000 / n * steady['watches']:.0f} watches open, the API server "
        f"{(steady['rss'] - base['rss']) / 2**20 / n:.2f} MiB more per agent; node-problem-detector "
        f"{10_000 / 300:.0f} PATCHes/s; the kubelets' Lease renewals {10_000 / 10:.0f}/s; in the minute after "
        f"an API server restart {10_000 / n * sum(herd['rates'].values()):.0f} requests/s"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        index, state_dir, interval, heartbeat = int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        worker(sys.stdin.read().split(), state_dir, index, interval, heartbeat)
    else:
        main()
