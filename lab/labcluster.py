"""The lab cluster's own rules, in one place: its kwok nodes and their capacity, the kubelet node's
kubelet configuration, and whether its controllers work (by their leases, the product's rule:
gpuop/judgment/leases.py). lab/lab.sh and lab/kubeletnode.sh call it; the tests import it. Stdlib only, so
that it runs before the project's virtualenv exists.

    python3 lab/labcluster.py nodes lab-node-1 lab-node-2      # their Node manifests (a JSON List)
    python3 lab/labcluster.py capacity                          # the lab's base capacity (JSON)
    python3 lab/labcluster.py kubelet-config ENDPOINT PORT [CA]  # a KubeletConfiguration (JSON)
    python3 lab/labcluster.py stale CONTEXT [SINCE]             # the controllers that do not work
"""

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project
from gpuop.judgment.leases import stalled_components  # stdlib only

# What every lab node has: the seed's (its DaemonSet asks 64Gi of a 32Gi node and stalls).
CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110"}
KWOK_MARK = {"kwok.x-k8s.io/node": "fake"}  # kwok manages the nodes that carry it, never a real kubelet's
ASK_TIMEOUT_S = 10  # one kubectl asking for the leases


def kwok_node(name: str, labels: dict | None = None, capacity: dict | None = None) -> dict:
    """A Node kwok runs, with the lab's capacity (``capacity`` added to it).

    kwok_node("lab-node-1")["status"]["allocatable"] -> {"cpu": "8", "memory": "32Gi", "pods": "110"}
    """
    have = {**CAPACITY, **(capacity or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_MARK),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "status": {"capacity": have, "allocatable": dict(have)},
    }


def kubelet_config(endpoint: str, port: int, client_ca: str = "", **more) -> dict:
    """A kubelet configuration for this lab's kind of machine: cgroup v1 (kubelet 1.35+ refuses it
    otherwise), no systemd, swap allowed, no QoS cgroups or node allocatable to enforce, no
    iptables of the host's to touch; reached on ``port`` only by a client of ``client_ca`` (the
    cluster's CA: the API server's logs and exec), or by none (a standalone kubelet).

        kubelet_config("unix:///run/containerd/containerd.sock", 10250)["cgroupDriver"] -> "cgroupfs"
    """
    x509 = {"x509": {"clientCAFile": client_ca}} if client_ca else {}
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,
        "containerRuntimeEndpoint": endpoint,
        "port": port,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}, **x509},
        "authorization": {"mode": "AlwaysAllow"},
        **more,
    }


# The kubelet node's kubelet: a runtime that goes down is seen within seconds, as the incident's
# restart was; the stand-in images are never pulled again, so they are kept, and nothing is
# evicted for this disk.
KUBELET_NODE = {
    "nodeStatusUpdateFrequency": "2s",
    "imageGCHighThresholdPercent": 100,
    "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
}


def stale(context: str, since: datetime | None) -> list:
    """The controllers of ``context`` whose leader lease is not held and fresh (renewed after
    ``since`` where given), in words; the API server's silence is one line too. A lease its holder
    gave up counts as none: the controller that wrote it is exiting (gpuop/judgment/leases.py)."""
    try:
        got = subprocess.run(
            [
                "kubectl",
                "--context",
                context,
                "--request-timeout=5s",
                "-n",
                "kube-system",
                "get",
                "leases",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=ASK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [f"the API server: no answer about the leases within {ASK_TIMEOUT_S}s"]
    if got.returncode != 0:
        return [f"the API server: {got.stderr.strip() or 'kubectl failed'}"]
    leases = [{**lease, "kind": "Lease"} for lease in json.loads(got.stdout)["items"]]
    return stalled_components(leases, [], datetime.now(UTC), since, held=True)


def main(argv: list) -> int:
    cli = argparse.ArgumentParser(prog="lab/labcluster.py", description=__doc__.splitlines()[0])
    sub = cli.add_subparsers(dest="cmd", required=True)
    sub.add_parser("nodes", help="the lab's kwok Nodes (a JSON List)").add_argument("names", nargs="+")
    sub.add_parser("capacity", help="the lab's base capacity (JSON)")
    kubelet = sub.add_parser("kubelet-config", help="the kubelet node's KubeletConfiguration (JSON)")
    kubelet.add_argument("endpoint")
    kubelet.add_argument("port", type=int)
    kubelet.add_argument("client_ca", nargs="?", default="")
    leases = sub.add_parser("stale", help="the controllers that do not work (exit 1 when any)")
    leases.add_argument("context")
    leases.add_argument("since", nargs="?", default="", help="seconds since the epoch; empty: none")
    a = cli.parse_args(argv)
    if a.cmd == "nodes":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [kwok_node(n) for n in a.names]}))
    elif a.cmd == "capacity":
        print(json.dumps(CAPACITY))
    elif a.cmd == "kubelet-config":
        print(json.dumps(kubelet_config(a.endpoint, a.port, a.client_ca, **KUBELET_NODE), indent=1))
    else:
        said = stale(a.context, datetime.fromtimestamp(int(a.since), UTC) if a.since else None)
        for line in said:
            print(line)
        return 1 if said else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
