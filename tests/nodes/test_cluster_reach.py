"""The node audit through the cluster (reach: cluster), on real kubelets: two simulated nodes, each
in its own mount, pid and UTS namespaces with its own containerd, whose kubelet registers it in
the lab cluster. Each node is read by a short-lived Pod on it, its log read through the API
server from the node's kubelet; the same nodes over SSH give the same report, the NVIDIA driver's
views and gaps included."""

import json
import os
import signal
import subprocess
import time

import pytest
import tomli_w

from gpuop.judgment.configs import nvidia_dropin
from gpuop.reach import nodepod
from lab import labproc
from tests.helpers import drivers, fleetobjects, layouts, nodesfiles, simnodes
from tests.helpers.clusterreach import audit
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import PYINFRA, target_commands
from tests.helpers.simnodes import Node

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

ENDPOINT = "unix:///run/containerd/containerd.sock"
READS = nodepod.NODE_LABEL  # every read Pod carries it


def upgraded_under_its_module(tree: drivers.Tree):
    """A driver package upgraded under its loaded module (tests/helpers/drivers.py)."""
    drivers.healthy(tree)
    tree.loaded(drivers.OLD)


def planted():
    """The incident's node (the seed's drop-in on 1.6, not loaded; its restart is fatal; and its
    driver package upgraded under its loaded module) and a healthy one (2.4.2 configured by the
    real nvidia-ctk before it started)."""
    return [
        Node(
            "reach-incident",
            "1.6.20",
            after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))],
            kubelet=ENDPOINT,
            registered=True,
            driver=upgraded_under_its_module,
        ),
        Node("reach-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], kubelet=ENDPOINT, registered=True),
    ]


EXPECTED = {
    "reach-incident": [
        ("driver-library-mismatch", "nvidia"),
        ("gpu-advertised-not-loaded", "reach-incident"),
        ("handler-not-loaded", "nvidia"),
        ("restart-takes-cri-down", "containerd"),
        ("sandbox-fails", "gpuop-fleet/gpu-reach-incident"),
    ],
    "reach-healthy": [],
}


def ready(name) -> bool:
    node = get(f"node/{name}")
    return bool(node) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or []
    )


@pytest.fixture(scope="module")
def reach(tmp_path_factory):
    """The nodes, their kubelets, their Pods and the reads leave nothing on the host: cgroups and
    sysctls too."""
    root = str(tmp_path_factory.mktemp("reach"))
    nodes = planted()
    with simnodes.running(nodes, root) as key:
        for n in nodes:
            eventually(f"node {n.name}'s kubelet to register it Ready", lambda: ready(n.name), timeout=120)
        fleetobjects.create_cluster_objects(nodes)
        yield nodes, nodesfiles.defaults_file(nodes, key, os.path.join(root, "nodes.yaml")), root


def read_pods() -> list:
    return (get("pods", "default", labelSelector=READS) or {}).get("items", [])


def in_node(n: Node) -> list:
    """(pid, argv) of every process in the node's pid namespace."""
    pid_ns, found = os.readlink(f"/proc/{simnodes.ns_pid(n)}/ns/pid"), []
    for pid, args in labproc.processes():
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == pid_ns:
                found.append((pid, args))
        except OSError:  # gone meanwhile
            pass
    return found


def node_state(n: Node) -> dict:
    """What a read must leave as it was on the node: its containerd's files, its processes (by
    command line), and the Pods its kubelet keeps."""
    pods = sorted(os.listdir(os.path.join(n.dir, "varlib/upper/kubelet/pods")))
    return {"etc": simnodes.etc_containerd(n), "processes": sorted(args for _, args in in_node(n)), "pods": pods}


def _found(doc):
    return {name: sorted((g["kind"], g["subject"]) for g in e["gaps"]) for name, e in doc["nodes"].items()}


def test_the_cluster_reach_reports_what_ssh_reports_field_for_field(reach):
    nodes, path, root = reach
    _, over_ssh = audit(path, root, name="ssh.json")
    before = {n.name: node_state(n) for n in nodes}
    run, through = audit(path, root, "reach=cluster", name="cluster.json", debug=True)
    assert run.code != 0  # the incident's node has gaps
    assert _found(through) == {n: sorted(g) for n, g in EXPECTED.items()}, run.log[-3000:]
    assert through["nodes"] == over_ssh["nodes"]
    assert through["gaps"] == over_ssh["gaps"] and through["unread"] == [] == over_ssh["unread"]
    # the API's view beside the node's own: containerd 2.4.2's kubelet reports its handlers, 1.6 none
    assert through["nodes"]["reach-healthy"]["runtime_handlers"] == ["", "nvidia", "runc"]
    assert through["nodes"]["reach-incident"]["runtime_handlers"] is None
    # its driver read through the read Pod as over SSH: the module loaded, the libraries upgraded
    driver = through["nodes"]["reach-incident"]["driver"]
    assert (driver["loaded"], driver["libraries"], driver["next_module"]) == (drivers.OLD, drivers.NEW, drivers.NEW)
    assert "driver" not in through["nodes"]["reach-healthy"]  # nothing of NVIDIA's there
    # one command per node, each in one read Pod; none left, and nothing else changed on the nodes
    assert sorted((host, fact.split(" ")[0]) for host, fact in target_commands(run.log)) == sorted(
        (f"@kubenode/{n.name}", "runbook.reach.node.NodeRuntime") for n in nodes
    ), run.log[-3000:]
    assert read_pods() == []
    for n in nodes:
        eventually(
            f"node {n.name} as before the read (its read Pod's containers and files gone)",
            lambda: node_state(n) == before[n.name],
            timeout=90,
        )


def test_one_line_audits_the_clusters_gpu_nodes_through_the_cluster(reach, tmp_path):
    """No nodes file, only the current context: the cluster lists its GPU nodes, each read
    through the cluster (crictl on the node's PATH, as on a real node: the lab's is linked in
    /usr/local/bin)."""
    nodes, _, _ = reach
    report = tmp_path / "fleet.json"
    env = {k: v for k, v in os.environ.items() if k != "GPUOP_NODES"}
    started = subprocess.run(
        [PYINFRA, "nodes.py", "audit.py", "-y", "--data", "reach=cluster", "--data", f"report={report}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode != 0, started.stderr[-3000:]  # gaps fail the run
    doc = json.loads(report.read_text())
    assert _found(doc) == {n: sorted(g) for n, g in EXPECTED.items()}, started.stderr[-3000:]
    assert "GAP reach-incident: [handler-not-loaded]" in started.stderr
    assert read_pods() == []


def test_a_read_pod_left_by_a_killed_run_is_removed_by_the_next(reach):
    nodes, path, root = reach
    proc = subprocess.Popen(
        [PYINFRA, "nodes.py", "audit.py", "-y", "--data", "reach=cluster"],
        env={**os.environ, "GPUOP_NODES": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        eventually("a read Pod of the run", read_pods, timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run dies with its Pods made
        proc.wait(30)
    left = read_pods()
    assert left  # it outlives the run that made it, till its end or deadline
    eventually("the left read Pods to end", lambda: all(nodepod.finished(p) for p in read_pods()), timeout=120)
    run, _ = audit(path, root, "reach=cluster", name="after-kill.json")
    for p in left:
        assert f"removing read Pod default/{p['metadata']['name']}, left by an earlier run" in run.log
    assert read_pods() == []


def test_a_node_whose_read_pod_cannot_start_is_named_with_its_event(reach, tmp_path):
    """Its image cannot be pulled: the read is given up once the pull failed twice, long before
    the node's deadline (150 s), naming the runtime's reason and the Pod's newest event once; the
    other node is reported."""
    nodes, _, root = reach
    key = os.path.join(root, "id_ed25519")
    path = nodesfiles.defaults_file(
        nodes, key, str(tmp_path / "nodes.yaml"), knobs={"reach-incident": {"node_pod_image": "gpuop.invalid/none:1"}}
    )
    started = time.monotonic()
    run, doc = audit(path, str(tmp_path), "reach=cluster")
    took = time.monotonic() - started
    assert run.code != 0
    (said,) = [line for line in run.log.splitlines() if "given up: its image" in line]
    assert "on node reach-incident given up: its image gpuop.invalid/none:1 cannot be pulled there (2 tries" in said
    assert "container waiting: " in said and "last event " in said, said
    assert any(reason in said for reason in ("ErrImagePull", "ImagePullBackOff")), said
    assert doc["unread"] == ["@kubenode/reach-incident"] and list(doc["nodes"]) == ["reach-healthy"]
    assert took < 75, took
    assert read_pods() == []


def test_a_tainted_node_is_read_all_the_same(reach):
    """A NoExecute taint (the one a kubelet admits no Pod past) keeps no read Pod out: it
    tolerates every taint, as kubectl debug's does."""
    nodes, path, root = reach
    kubectl("taint", "node", "reach-healthy", "gpuop.test/drain=now:NoExecute")
    try:
        run, doc = audit(path, root, "reach=cluster", name="tainted.json")
    finally:
        kubectl("taint", "node", "reach-healthy", "gpuop.test/drain=now:NoExecute-")
    assert doc["unread"] == [] and sorted(doc["nodes"]) == ["reach-healthy", "reach-incident"], run.log[-3000:]
    assert sorted(doc["nodes"]["reach-healthy"]["loaded"]) == ["nvidia", "runc"]


def test_a_node_whose_kubelet_is_gone_is_named_and_the_rest_is_reported(reach, tmp_path):
    """Last: the node's kubelet stopped, as on a node gone NotReady: no kubelet takes its read
    Pod, which is said at the node's deadline; the other node is reported."""
    nodes, _, root = reach
    incident = next(n for n in nodes if n.name == "reach-incident")
    kubelets = [pid for pid, args in in_node(incident) if args[0].endswith("/kubelet")]
    assert len(kubelets) == 1, kubelets
    os.kill(kubelets[0], signal.SIGKILL)
    path = nodesfiles.defaults_file(
        nodes,
        os.path.join(root, "id_ed25519"),
        str(tmp_path / "nodes.yaml"),
        knobs={"reach-incident": {"node_read_timeout_s": 15}},
    )
    run, doc = audit(path, str(tmp_path), "reach=cluster")
    said = next(line for line in run.log.splitlines() if "did not complete within 15s" in line)
    assert "on node reach-incident" in said and "phase Pending, no kubelet has taken it" in said, said
    assert doc["unread"] == ["@kubenode/reach-incident"] and list(doc["nodes"]) == ["reach-healthy"]
    assert read_pods() == []
