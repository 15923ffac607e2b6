"""The lab's kubelet node (make run NODE=kubelet): lab-node-0 is a real kubelet on the lab containerd, in
a namespace of its own (lab/kubeletnode.sh). The incident, the repair and the drift, for the
containerd the lab ships (1.6.20) and the newest 2.x, asserted from the live cluster."""

import json
import os
import pathlib
import re
import signal
import time
from dataclasses import dataclass

import pytest

from gpuop.judgment.containerd import cri_runtimes
from gpuop.reach import nodepod
from tests.helpers import simnodes
from tests.helpers.kube import LAB, eventually, get, lab_up, reset_lab
from tests.helpers.labcontainerd import binary, crictl_info, lab_daemons, nvidia_ctk
from tests.helpers.playbook import PYINFRA, deploy, stop_daemons_under
from tests.helpers.proc import run
from tests.helpers.ssh import free_port

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

NODE = "lab-node-0"
REALNODE_SH = "lab/kubeletnode.sh"
# What each containerd says when a Pod names a handler it does not hold (their sources' words).
SANDBOX_ERROR = {
    "1.6.20": re.escape('failed to get sandbox runtime: no runtime for "nvidia" is configured'),
    "2.4.2": 'unable to get OCI runtime for sandbox "[0-9a-f]{64}": no runtime for "nvidia" is configured',
}

# What kubelet copies to Node.status.runtimeHandlers from its runtime's CRI status: containerd
# 2.x names its handlers ("" the default one), 1.x none.
API_HANDLERS = {
    "1.6.20": {"incident": None, "fixed": None},
    "2.4.2": {"incident": ["", "runc"], "fixed": ["", "nvidia", "runc"]},
}


@dataclass
class RealLab:
    root: str
    version: str

    @property
    def data(self) -> tuple:
        return (f"kubelet_node={NODE}", f"containerd_binary={binary(self.version)}")

    @property
    def kubelet_node_dir(self) -> str:
        return os.path.join(self.root, "var", "node")

    @property
    def socket(self) -> str:
        return os.path.join(self.root, "run", "containerd", "containerd.sock")

    def up(self):
        """`make lab-up NODE=kubelet`: the cluster, and the kubelet node on this root."""
        env = {**os.environ, "LAB_KUBELET_NODE": NODE, "LAB_ROOT": self.root, "LAB_CONTAINERD": binary(self.version)}
        result = run(["lab/lab.sh", "up", LAB], timeout_s=600, env=env)
        assert result.returncode == 0, result.stderr

    def run(self, script="deploy.py", *data):
        """`make run NODE=kubelet` (or fix): the lab up, then the playbook; it must succeed."""
        self.up()
        done = deploy(self.root, *self.data, *data, script=script)
        assert done.code == 0, done.log
        return done


def node_namespace_pids(lab: RealLab) -> list:
    """Every process in the kubelet node's mount namespace (none once it is gone)."""
    ns = os.path.join(lab.kubelet_node_dir, "mnt")
    try:
        want = f"mnt:[{os.stat(ns).st_ino}]"
    except FileNotFoundError:
        return []
    found = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and os.readlink(f"/proc/{p}/ns/mnt") == want:
                found.append(int(p))
        except OSError:
            pass
    return found


def sandbox_events(pod) -> list:
    events = get("events", "gpu-lab")["items"]
    return [
        e
        for e in events
        if e["reason"] == "FailedCreatePodSandBox" and e["involvedObject"].get("uid") == pod["metadata"]["uid"]
    ]


def node_ready(name=NODE):
    node = get(f"node/{name}")
    cond = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    return node, cond


@pytest.fixture(scope="module", params=sorted(SANDBOX_ERROR))
def kubelet_lab(request, tmp_path_factory):
    host_before = simnodes.host_files()
    reset_lab()
    lab = RealLab(str(tmp_path_factory.mktemp(f"real-{request.param}") / "gpuop"), request.param)
    try:
        lab.up()
        yield lab
    finally:
        run([REALNODE_SH, "stop", lab.root], timeout_s=60)
        stop_daemons_under(lab.root)
        reset_lab()
        lab_up()  # the seed's lab again: kwok's lab-node-0
    # kubelet, its containerd and the Pods wrote nothing on the host: sysctls, /var/lib/kubelet...
    assert simnodes.host_files() == host_before


def test_incident_pod_binds_and_its_sandbox_fails_with_containerds_words(kubelet_lab):
    kubelet_lab.run()
    node = get(f"node/{NODE}")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"  # a real kubelet, not kwok
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == f"containerd://{kubelet_lab.version}"
    assert node["status"]["capacity"]["memory"] == "32Gi"  # the seed's, read in the node's /proc/meminfo
    pod = get("pod/cuda-probe", "gpu-lab")
    assert pod["spec"]["nodeName"] == NODE and pod["status"]["phase"] == "Pending"
    events = sandbox_events(pod)
    with open(os.path.join(kubelet_lab.root, "out", "sandbox.txt")) as f:
        reason, message, handler, where = f.read().splitlines()
    assert reason == "FailedCreatePodSandBox" and handler == "handler nvidia" and where == f"node {NODE}"
    assert message in [e["message"] for e in events]  # the kubelet's own live event
    assert re.fullmatch(
        r"Failed to create pod sandbox: rpc error: code = Unknown desc = " + SANDBOX_ERROR[kubelet_lab.version], message
    )
    with open(os.path.join(kubelet_lab.root, "out", "rollout.txt")) as f:
        rollout = f.read()
    assert "READY=2\n" in rollout and "BLOCKER=insufficient-memory" in rollout  # step 8 stalls as before
    # nothing ran through the stand-in nvidia runtime: containerd does not hold it
    assert not os.path.exists(os.path.join(kubelet_lab.kubelet_node_dir, "nvidia-container-runtime.log"))
    again = deploy(kubelet_lab.root, *kubelet_lab.data)
    assert again.code == 0 and again.changed == 0, (again.changed_ops(), again.log[-2500:])
    # the audit's forecast of that failure, held against the kubelet's event: it agrees
    audited = deploy(kubelet_lab.root, *kubelet_lab.data, script="audit.py")
    assert audited.code != 0  # the incident's gaps fail it
    with open(os.path.join(kubelet_lab.root, "out", "audit.json")) as f:
        result = json.load(f)
    sandboxes = result["sandboxes"]
    assert [(s["pod"], s["node"], s["agrees"]) for s in sandboxes] == [("gpu-lab/cuda-probe", NODE, True)]
    # the API's view of loaded: kubelet's copy of its runtime's CRI status (2.x reports it, 1.x none)
    assert result["handlers"]["runtime_handlers"] == API_HANDLERS[kubelet_lab.version]["incident"]
    assert "loaded-disagrees-with-api" not in [g["kind"] for g in result["gaps"]]
    # the fleet audit of this node, unreachable: judged on its kubelet's report alone where 2.x
    # makes one (the GPU Pod cannot start), not judged at all on 1.x
    nodes = os.path.join(kubelet_lab.root, "nodes.yaml")
    with open(nodes, "w") as f:
        f.write(
            f"hosts:\n  unreachable:\n    ssh_hostname: 127.0.0.1\n    ssh_port: {free_port()}\n    node_name: {NODE}\n"
        )
    report = os.path.join(kubelet_lab.root, "fleet.json")
    fleet_run = deploy(None, f"report={report}", env={"GPUOP_NODES": nodes}, inventory="nodes.py", script="audit.py")
    assert fleet_run.code != 0
    with open(report) as f:
        fleet_report = json.load(f)
    assert fleet_report["unread"] == ["unreachable"]
    if API_HANDLERS[kubelet_lab.version]["incident"] is None:
        assert fleet_report["nodes"] == {} and fleet_report["judged_from_api"] == {}
    else:
        entry = fleet_report["nodes"][NODE]
        assert (entry["loaded_from"], entry["loaded"]) == ("api", ["runc"])
        assert ("sandbox-fails", "gpu-lab/cuda-probe") in [(g["kind"], g["subject"]) for g in entry["gaps"]]
    assert sandboxes[0]["event"] in [e["message"] for e in sandbox_events(pod)]


# What the incident leaves on the kubelet node, as the fleet table's cells: loaded, after a
# restart, CRI after a restart (1.x: the drop-in replaces the runtimes; 2.x merges it).
INCIDENT_ROW = {"1.6.20": ("runc", "nvidia", "fails"), "2.4.2": ("runc", "nvidia,runc", "ok")}


def test_the_readme_s_one_line_cluster_reach_reads_the_kubelet_node(kubelet_lab):
    """The README's line as a new user types it after `make run NODE=kubelet`: every GPU node of
    the current context, each read by a short-lived Pod. The kubelet node's read Pod really runs
    (its image is in the node's store): its full report. kwok's GPU nodes have no runtime: each
    is named once with why, at once (lab/read-pod-stage.yaml), never waited on to its deadline."""
    env = {k: v for k, v in os.environ.items() if k != "GPUOP_NODES"}
    said = run([PYINFRA, "nodes.py", "audit.py", "-y", "--data", "reach=cluster"], timeout_s=300, env=env)
    log = said.stderr
    assert said.returncode != 0, log[-3000:]  # the incident's gaps fail it
    row = next((line.split() for line in log.splitlines() if line.split()[:1] == [NODE]), None)
    assert row is not None, log[-3000:]
    runtime, version, loaded, after, cri = row[1:6]  # the fleet table's node row
    assert (runtime, version) == ("containerd", kubelet_lab.version), row
    assert (loaded, after, cri) == INCIDENT_ROW[kubelet_lab.version], row
    assert f"GAP {NODE}: [handler-not-loaded]" in log and f"GAP {NODE}: [sandbox-fails] " in log
    kwok_gpu_nodes = sorted(
        n["metadata"]["name"]
        for n in get("nodes")["items"]
        if int((n["status"].get("allocatable") or {}).get("nvidia.com/gpu", "0")) > 0 and n["metadata"]["name"] != NODE
    )
    assert kwok_gpu_nodes  # the lab's time-sliced node at least
    for name in kwok_gpu_nodes:
        (ended,) = [line for line in log.splitlines() if f"on node {name} ended before its command ran" in line]
        assert f"reason NoContainerRuntime (kwok's node {name} has no container runtime to run it)" in ended
    assert "did not complete within 150s" not in log and "Traceback" not in log  # not waited on
    assert [p for p in get("pods", "default")["items"] if nodepod.NODE_LABEL in p["metadata"].get("labels", {})] == []


def test_reboot_takes_the_node_where_restart_txt_said(kubelet_lab):
    with open(os.path.join(kubelet_lab.root, "out", "restart.txt")) as f:
        cri_ok = "RESTART_CRI=ok\n" in f.read()
    kubelet_lab.run("deploy.py", "reboot=true")
    with open(os.path.join(kubelet_lab.root, "out", "reboot.txt")) as f:
        said = dict(line.split("=", 1) for line in f.read().splitlines())
    node, ready = node_ready()  # the live Node
    assert (said["READY"], said["REASON"], said["MESSAGE"]) == (ready["status"], ready["reason"], ready["message"])
    assert said["FORECAST_CRI"] == ("ok" if cri_ok else "fails") and said["MATCHES"] == "yes"
    if cri_ok:  # 2.x merges the drop-in: the restart loads nvidia, and the node stays Ready
        assert ready["status"] == "True" and said["CHANGED_AFTER_S"] == "unchanged"
    else:  # 1.x: the drop-in replaced the runtimes, CRI does not load, the node goes down for real
        assert ready["status"] == "False" and "container runtime is down" in ready["message"]
        assert 0 <= int(said["CHANGED_AFTER_S"]) <= 60
        eventually(
            "the not-ready taint",
            lambda: "node.kubernetes.io/not-ready" in [t["key"] for t in get(f"node/{NODE}")["spec"].get("taints", [])],
            timeout=60,
        )
    # the next plain run brings the incident back: the daemon restarted with the main config alone
    kubelet_lab.run()
    assert len(lab_daemons(kubelet_lab.root)) == 1
    eventually("the kubelet node Ready again", lambda: node_ready()[1]["status"] == "True", timeout=60)
    code, info = crictl_info(pathlib.Path(kubelet_lab.root))
    assert code == 0 and cri_runtimes(info)[0] == ["runc"]


def test_fix_runs_the_gpu_pod_through_the_nvidia_runtime(kubelet_lab):
    kubelet_lab.run("fix.py", f"nvidia_ctk_binary={nvidia_ctk()}")
    pod = get("pod/cuda-probe", "gpu-lab")
    assert pod["status"]["phase"] == "Running" and pod["spec"]["nodeName"] == NODE
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    with open(os.path.join(kubelet_lab.kubelet_node_dir, "nvidia-container-runtime.log")) as f:
        calls = f.read()
    assert re.search(rf" create --bundle \S+/{container} ", calls), calls  # runc, called by the stand-in
    assert node_ready()[1]["status"] == "True"
    with open(os.path.join(kubelet_lab.root, "out", "audit.json")) as f:
        result = json.load(f)
    assert result["gaps"] == []  # the API's view agrees with CRI's too
    assert result["handlers"]["runtime_handlers"] == API_HANDLERS[kubelet_lab.version]["fixed"]


def test_kubelet_killed_comes_back(kubelet_lab):
    service = run(
        ["pgrep", "-f", "--", f"kubelet-service {kubelet_lab.kubelet_node_dir}/"], timeout_s=10
    ).stdout.split()
    kubelet = run([REALNODE_SH, "kubelet", kubelet_lab.root], timeout_s=10).stdout.split()
    assert service and kubelet
    for pid in service + kubelet:
        os.kill(int(pid), signal.SIGKILL)
    kubelet_lab.run()
    assert run([REALNODE_SH, "kubelet", kubelet_lab.root], timeout_s=10).stdout.split() not in ([], kubelet)
    eventually("the kubelet node Ready", lambda: node_ready()[1]["status"] == "True", timeout=60)
    assert len(lab_daemons(kubelet_lab.root)) == 1


def test_namespace_gone_comes_back_with_the_incident(kubelet_lab):
    gone_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    gone = run([REALNODE_SH, "stop", kubelet_lab.root], timeout_s=60)
    assert gone.returncode == 0 and not node_namespace_pids(kubelet_lab), gone.stderr
    kubelet_lab.run()
    daemons = lab_daemons(kubelet_lab.root)
    assert len(daemons) == 1 and int(daemons[0]) in node_namespace_pids(kubelet_lab)
    # the GPU Pod's sandbox died with the node, and its new one fails: the incident again
    pod = get("pod/cuda-probe", "gpu-lab")
    eventually(
        "a new sandbox failure of the GPU Pod",
        lambda: [
            e
            for e in sandbox_events(pod)
            if e["message"].endswith('no runtime for "nvidia" is configured') and e["lastTimestamp"] >= gone_at
        ],
        timeout=60,
    )
    # kubelet reports the container's end at its next status sync: wait for it, within a deadline
    eventually(
        "the GPU Pod's container not ready",
        lambda: not get("pod/cuda-probe", "gpu-lab")["status"]["containerStatuses"][0]["ready"],
        timeout=60,
    )


def test_stand_in_image_removed_comes_back(kubelet_lab):
    image = "nvcr.io/nvidia/k8s/container-toolkit:v1.16.2"
    ctr = ["ctr", "--address", kubelet_lab.socket, "--namespace", "k8s.io"]
    assert run([*ctr, "images", "rm", image], timeout_s=30).returncode == 0
    kubelet_lab.up()
    assert image in run([*ctr, "images", "list", "--quiet"], timeout_s=30).stdout.split()


def test_lab_down_leaves_no_process_mount_or_namespace(kubelet_lab):
    stopped = run([REALNODE_SH, "stop-all", LAB], timeout_s=60)  # what `make lab-down` runs for it
    assert stopped.returncode == 0, stopped.stderr
    assert not node_namespace_pids(kubelet_lab) and not lab_daemons(kubelet_lab.root)
    assert not run([REALNODE_SH, "kubelet", kubelet_lab.root], timeout_s=10).stdout.strip()
    with open("/proc/self/mountinfo") as f:
        assert kubelet_lab.root not in f.read()
