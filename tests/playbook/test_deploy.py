"""The whole incident playbook against the real lab cluster (issue 3)."""

import os
import re
import socket
import subprocess
import tomllib

import pytest
import yaml

from gpuop.judgment.scheduling import pod_scheduled
from tests.helpers.expected import LOADED_NVIDIA, MERGE, NODE_GPU, ROLLOUT, SLOTS, UNSCHEDULED
from tests.helpers.kube import GPU, get, kubectl, reset_lab
from tests.helpers.playbook import (
    LAB_LOCK,
    deploy,
    fake_containerd,
    fresh_incident,
    reads_repeated,
    target_commands,
    tree,
)
from tests.helpers.proc import run as run_process

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """A fresh lab and one run of the playbook into a temporary root."""
    return fresh_incident(tmp_path_factory, "incident")


def read(root, rel):
    return open(os.path.join(root, rel)).read()


def summary_at_end(
    run,
    root,
    slots="20 advertised from 4 GPUs x 5; 0 GiB guaranteed per slot, isolation none",
    gpus="lab-node-0 4, lab-node-1 0, lab-node-2 0",
    rollout="1/3 updated, 2 Ready, 2 on the old image; blocker insufficient-memory",
):
    """The run's log ends with the incident's summary: the seed's values, the scheduler's own
    words (unscheduled.txt, as the lab's scheduler says them), and the lab containerd's."""
    assert read(root, "out/unscheduled.txt") == UNSCHEDULED
    reason, message = UNSCHEDULED.splitlines()
    want = [
        f"What the incident showed on @local (reports in {root}/out):",
        "written    main config runc; drop-in nvidia, which replaces "
        'plugins."io.containerd.grpc.v1.cri".containerd.runtimes (merge.txt)',
        "loaded     runc, from cri (merge.txt, restart.txt)",
        'restart    containerd 1.6.20 would load nvidia; its CRI fails: default_runtime_name "runc" '
        "has no runtime in containerd.runtimes (configured: nvidia); containerd 1.6: the runtimes an "
        "imported file names replace the main config's whole; a version above 2 is not checked (1.6.32 and "
        "1.7.17 stop the daemon on it) (restart.txt)",
        f"scheduled  the GPU Pod Pending, {reason}: {message} (unscheduled.txt)",
        f"GPUs       {gpus} (node-gpu.txt)",
        f"slots      {slots} (slots.txt)",
        f"rollout    {rollout} (rollout.txt)",
    ]
    tail = [line.strip() for line in run.log.rstrip("\n").splitlines()[-len(want) :]]
    assert tail == want, run.log[-3000:]


def gpus(node):
    status = get(f"node/{node}")["status"]
    return status["capacity"].get(GPU), status["allocatable"].get(GPU)


def test_configs_and_script(incident):
    root = incident
    main = tomllib.loads(read(root, "etc/containerd/config.toml"))
    assert main["version"] == 2
    assert f"{root}/etc/containerd/conf.d/*.toml" in main["imports"]
    cri = main["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "runc"
    assert cri["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}
    assert '[plugins."io.containerd.grpc.v1.cri".containerd]' in read(root, "etc/containerd/config.toml")
    dropin = tomllib.loads(read(root, "etc/containerd/conf.d/99-nvidia.toml"))
    assert dropin["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True},
    }
    assert read(root, "bin/check-runtime.sh") == open("files/check-runtime.sh").read()


def test_modes(incident):
    root = incident
    for rel, (mode, _, body) in tree(root).items():
        if rel.startswith(".gpuop"):
            continue
        want = "0o755" if body is None or rel.startswith("bin/") else "0o644"
        assert mode == want, rel


def test_reports_byte_for_byte(incident):
    root = incident
    assert read(root, "out/merge.txt") == MERGE
    assert read(root, "out/node-gpu.txt") == NODE_GPU
    assert read(root, "out/slots.txt") == SLOTS
    assert read(root, "out/rollout.txt") == ROLLOUT


def test_unscheduled_is_what_the_scheduler_said(incident):
    root = incident
    text = read(root, "out/unscheduled.txt")
    assert text.count("\n") == 2 and text.endswith("\n")  # SPEC: two lines, each ended
    reason, message = text.splitlines()
    assert reason == "Unschedulable"
    assert message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert "preemption: 0/3 nodes are available: 3 " in message
    # The scheduler records the same words as an event on the Pod it could not place.
    events = get("events", "gpu-lab", fieldSelector="involvedObject.name=cuda-probe,reason=FailedScheduling")
    assert message in [e["message"] for e in events["items"]]


def test_manifests(incident):
    root = incident
    rc = yaml.safe_load(read(root, "k8s/runtimeclass.yaml"))
    assert (rc["kind"], rc["metadata"], rc["handler"]) == ("RuntimeClass", {"name": "nvidia"}, "nvidia")
    pod = yaml.safe_load(read(root, "k8s/gpu-pod.yaml"))
    assert pod["metadata"] == {"name": "cuda-probe", "namespace": "gpu-lab"}
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert pod["spec"]["containers"][0]["resources"]["limits"][GPU] == 1
    text = read(root, "k8s/time-slicing.yaml")
    assert "  any: |-\n" in text
    cm = yaml.safe_load(text)
    assert cm["metadata"] == {"name": "time-slicing-config", "namespace": "gpu-operator"}
    sharing = yaml.safe_load(cm["data"]["any"])["sharing"]["timeSlicing"]
    assert sharing["failRequestsGreaterThanOne"] is True
    assert sharing["resources"][0] == {"name": GPU, "replicas": 5}
    ds = yaml.safe_load(read(root, "k8s/toolkit-ds.yaml"))
    assert ds["metadata"] == {"name": "nvidia-container-toolkit", "namespace": "gpu-operator"}
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/k8s/container-toolkit:v1.17.0"
    assert container["resources"]["requests"]["memory"] == "64Gi"


def test_cluster_is_in_the_incident_end_state(incident):
    assert get("runtimeclass/nvidia")["handler"] == "nvidia"
    pod = get("pod/cuda-probe", "gpu-lab")
    assert (pod["status"]["phase"], pod["spec"]["nodeName"]) == ("Running", "lab-node-0")
    assert gpus("lab-node-0") == ("4", "4")
    assert gpus("lab-node-1") == ("20", "20")
    assert gpus("lab-node-2") == (None, None)
    assert get("configmap/time-slicing-config", "gpu-operator")["data"]["any"].startswith("version: v1")
    ds = get("daemonset/nvidia-container-toolkit", "gpu-operator")
    assert (ds["status"]["updatedNumberScheduled"], ds["status"]["numberReady"]) == (1, 2)
    pods = get("pods", "gpu-operator")["items"]
    stuck = [p for p in pods if p["status"]["phase"] == "Pending"]
    assert len(stuck) == 1 and "Insufficient memory" in pod_scheduled(stuck[0])["message"]
    # The upgrade was pushed only after every initial Pod was Ready.
    old = [p for p in pods if p["status"]["phase"] == "Running"]
    ready_at = max(c["lastTransitionTime"] for p in old for c in p["status"]["conditions"] if c["type"] == "Ready")
    assert ready_at <= stuck[0]["metadata"]["creationTimestamp"]


def test_second_run_changes_nothing(incident):
    root = incident
    before = tree(root)
    run = deploy(root, debug=True)
    assert run.code == 0, run.log
    assert run.changed == 0, run.changed_ops()
    assert tree(root) == before
    summary_at_end(run, root)
    # Read once, decide everywhere: the lock taken and one batched read of files, cluster and
    # containerd in one round trip, then the lock's release.
    commands = [what for _, what in target_commands(run.log)]
    assert [what.split(" (")[0] for what in commands] == ["runbook.reach.batch.Batch", "change"], commands
    read = re.findall(r"<class '([\w.]+)'>", commands[0])
    assert read == [
        "pyinfra.facts.server.Command",
        "runbook.reach.files.Files",
        "runbook.reach.kube.KubeObjects",
        "runbook.reach.containerd.LabContainerd",
        "runbook.reach.containerd.ContainerdRestart",
    ], read
    assert "mkdir /tmp/gpuop-" in commands[0] and "first_alone=True" in commands[0], commands[0]


def test_a_lab_run_loads_neither_the_kubernetes_client_nor_prometheus_s(incident):
    """deploy.py, fix.py and audit.py on a lab host never import what only the fleet audit uses
    (the kubernetes client alone takes a second to import), as Python's own import profile of
    each run shows. fix.py here is refused at its preflight, after every import."""
    for script, data in (("deploy.py", ()), ("audit.py", ()), ("fix.py", ("toolkit_memory_fix=40Gi",))):
        run = deploy(incident, *data, script=script, env={"PYTHONPROFILEIMPORTTIME": "1"})
        assert not os.path.exists(LAB_LOCK), f"{script} left the lab lock {LAB_LOCK}"  # the refused one too
        imported = {
            line.rsplit("|", 1)[1].strip()
            for line in run.log.splitlines()
            if line.startswith("import time:") and "|" in line
        }
        # the profile is there (tomli_w no longer: the lab audit writes no TOML, nor imports what does)
        assert {"pyinfra", "yaml"} <= imported, script
        assert sorted(m for m in imported if m.split(".")[0] in ("kubernetes", "prometheus_client")) == [], script


def test_a_fresh_run_reads_nothing_twice_between_two_changes(tmp_path):
    reset_lab()
    root = tmp_path / "gpuop"
    # A run killed before it dropped the lab lock: this one takes the lock over, and the read
    # that came with its first try stands (the dead run kept every other run out until then).
    gone = subprocess.Popen(["true"])
    gone.wait(10)
    os.makedirs(LAB_LOCK, exist_ok=True)
    with open(os.path.join(LAB_LOCK, "owner"), "w") as f:
        f.write(f"{socket.gethostname()} pid {gone.pid} since 2026-12-01T00:00:00\n")
    run = deploy(root, debug=True)
    assert run.code == 0, run.log
    assert f"taking over {LAB_LOCK} from a run that is gone" in run.log
    assert reads_repeated(run.log) == []
    batches = [what for _, what in target_commands(run.log) if what.startswith("runbook.reach.batch.Batch")]
    # Files are read at the start and once more after the drop-ins were set aside and put back;
    # every file the run writes after that is known without reading it back.
    assert sum("runbook.reach.files.Files" in b for b in batches) == 2, batches
    audit = deploy(root, debug=True, script="audit.py")
    assert audit.code != 0  # the incident has gaps
    assert len(target_commands(audit.log)) <= 6


def test_dry_run_plans_and_changes_nothing(tmp_path):
    reset_lab()
    root = tmp_path / "gpuop"
    run = deploy(root, dry=True)
    assert run.code == 0, run.log
    assert not root.exists()
    assert get("runtimeclass/nvidia") is None and get("namespace/gpu-lab") is None
    assert gpus("lab-node-0") == (None, None)
    planned = {op["name"]: op["hosts_with_change"] for op in run.doc["plan"]}
    assert planned["Step 1: containerd main config | config.toml"] == ["@local"]
    assert planned["Step 8: a toolkit upgrade that stalls on memory | rollout.txt"] == ["@local"]


def test_other_knobs_follow_the_live_values(tmp_path):
    reset_lab()
    root = tmp_path / "gpuop"
    data = ("replicas=3", "gpu_count=2", "toolkit_memory_upgrade=256Mi", "physical_gpus=2", "vram_per_gpu_gib=80")
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert read(root, "out/node-gpu.txt") == "NAME GPU\nlab-node-0 2\nlab-node-1 0\nlab-node-2 0\n"
    assert read(root, "out/slots.txt").splitlines()[:4] == [
        "PHYSICAL_GPUS=2",
        "REPLICAS=3",
        "ADVERTISED=6",
        "VRAM_PER_GPU_GIB=80",
    ]
    assert gpus("lab-node-1") == ("6", "6")
    assert read(root, "out/rollout.txt") == (
        "DESIRED=3\nUPDATED=3\nREADY=3\nOLD_IMAGE_PODS=0\nMAX_UNAVAILABLE=1\nBLOCKER=none\n"
    )
    summary_at_end(
        run,
        root,
        slots="6 advertised from 2 GPUs x 3; 0 GiB guaranteed per slot, isolation none",
        gpus="lab-node-0 2, lab-node-1 0, lab-node-2 0",
        rollout="3/3 updated, 3 Ready, 0 on the old image; blocker none",
    )
    again = deploy(root, *data)
    assert again.code == 0 and again.changed == 0, again.changed_ops()


def test_a_containerd_first_on_path_is_not_the_lab_s(tmp_path):
    """Another containerd first on the target's PATH (a fake whose dump holds nvidia, standing for
    the host's own) changes nothing the playbook reports: loaded is the lab daemon's answer. The
    deployed check-runtime.sh asks `containerd config dump` through PATH by its contract, so it
    judges that binary's dump."""
    env, dump = fake_containerd(tmp_path, LOADED_NVIDIA)
    root = tmp_path / "gpuop"
    run = deploy(root, env=env)
    assert run.code == 0, run.log
    assert read(root, "out/merge.txt") == MERGE
    assert read(root, "out/restart.txt").startswith("CONTAINERD_VERSION=1.6.20\nLOADED_RUNTIMES=runc\n")

    def check():
        return run_process([str(root / "bin/check-runtime.sh")], timeout_s=30, env={**os.environ, **env})

    assert check().returncode == 0
    dump.write_text('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n')
    assert check().returncode == 1


def test_a_wait_that_cannot_end_names_what_and_the_last_state(tmp_path):
    reset_lab()
    kubectl("taint", "node", "lab-node-0", "gpuop-test=hold:NoSchedule")
    try:
        run = deploy(tmp_path / "gpuop", "wait_timeout_s=3")
    finally:
        kubectl("taint", "node", "lab-node-0", "gpuop-test=hold:NoSchedule-")
    assert run.code != 0
    assert "timed out after 3s waiting for Pod gpu-lab/cuda-probe Running" in run.log
    assert "last seen: phase Pending, on no node, PodScheduled False Unschedulable" in run.log
    assert "What the incident showed" not in run.log  # a failed host's error is the news


def test_bad_knob_stops_before_any_change(tmp_path):
    reset_lab()
    root = tmp_path / "gpuop"
    run = deploy(root, "replicas=0")
    assert run.code != 0
    assert re.search(r"@local: knob replicas='?0'?: expected an integer >= 1", run.log)
    assert not root.exists() and get("namespace/gpu-lab") is None
