"""From incident to healthy with fix.py, verified live, and back with deploy.py (issue 10).

Every test runs on the real lab cluster and a real lab containerd, with both versions the lab
offers: Debian's 1.6.20 and 2.4.2 built from its Go module.
"""

import json
import signal

import pytest

from tests.expected import MERGE, NODE_GPU, ROLLOUT, SLOTS
from tests.kube import get, reset_lab
from tests.labcontainerd import binary, crictl_info, loaded
from tests.playbook import PYINFRA, RUN_DEADLINE_S, deploy, lab_daemon_pid, target_commands, tree
from tests.proc import Started

VERSIONS = ("1.6.20", "2.4.2")
REPORTS = {"merge.txt": MERGE, "node-gpu.txt": NODE_GPU, "slots.txt": SLOTS, "rollout.txt": ROLLOUT}


def fix(root, *data, debug=False):
    return deploy(root, *data, script="fix.py", debug=debug)


def audit(root, *data):
    return deploy(root, *data, script="audit.py")


def incident(tmp_path, version):
    reset_lab()
    root = tmp_path / "gpuop"
    data = (f"containerd_binary={binary(version)}",)
    run = deploy(root, *data)
    assert run.code == 0, run.log
    return root, data


def assert_healthy(root):
    """crictl shows runc and nvidia, the toolkit runs the upgrade 3/3, the GPU Pod runs."""
    assert loaded(root) == ["nvidia", "runc"]
    ds = get("daemonset/nvidia-container-toolkit", "gpu-operator")
    status = ds["status"]
    assert (status["desiredNumberScheduled"], status["updatedNumberScheduled"], status["numberReady"]) == (3, 3, 3)
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith(":v1.17.0") and container["resources"]["requests"]["memory"] == "256Mi"
    pods = get("pods", "gpu-operator")["items"]
    assert sorted(p["status"]["phase"] for p in pods) == ["Running"] * 3
    pod = get("pod/cuda-probe", "gpu-lab")
    assert (pod["spec"]["runtimeClassName"], pod["status"]["phase"]) == ("nvidia", "Running")
    assert pod["spec"]["nodeName"] == "lab-node-0"


@pytest.mark.parametrize("version", VERSIONS)
def test_incident_fixed_then_back(tmp_path, version):
    root, data = incident(tmp_path, version)
    fresh = {name: (root / "out" / name).read_text() for name in (*REPORTS, "unscheduled.txt")}
    dropin = (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()

    run = fix(root, *data)
    assert run.code == 0, run.log
    assert_healthy(root)
    assert "no gap: written is loaded is scheduled" in run.log
    result = json.loads((root / "out/audit.json").read_text())
    assert result["handlers"]["written"] == ["runc", "nvidia"]
    assert sorted(result["handlers"]["loaded"]) == sorted(result["handlers"]["after_restart"]) == ["nvidia", "runc"]
    assert result["handlers"]["restart_cri"] == "ok"
    assert [w["kind"] for w in result["warnings"]] == ["time-sliced-memory-shared"]
    # On 1.x the drop-in is replaced by one carrying the CRI section, the old one kept; on 2.x
    # the toolkit's minimal drop-in already survives the merge and stays as it is.
    backups = list((root / "etc/containerd/conf.d").glob("99-nvidia.toml.gpuop-bak.*"))
    assert [b.read_text() for b in backups] == ([dropin] if version == "1.6.20" else [])
    now = (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert ('default_runtime_name = "runc"' in now) == (version == "1.6.20")
    assert "RESTART_CRI=ok" in (root / "out/restart.txt").read_text()
    assert audit(root, *data).code == 0

    pid = lab_daemon_pid(root)
    again = fix(root, *data, debug=True)
    assert again.code == 0 and again.changed == 0, again.changed_ops()
    assert lab_daemon_pid(root) == pid  # no second restart
    assert len(target_commands(again.log)) <= 8, target_commands(again.log)

    back = deploy(root, *data)
    assert back.code == 0, back.log
    assert {name: (root / "out" / name).read_text() for name in fresh} == fresh
    assert loaded(root) == ["runc"]
    assert audit(root, *data).code != 0
    gaps = [g["kind"] for g in json.loads((root / "out/audit.json").read_text())["gaps"]]
    assert "handler-not-loaded" in gaps and "rollout-stalled" in gaps
    assert ("restart-takes-cri-down" in gaps) == (version == "1.6.20")

    assert fix(root, *data).code == 0
    assert_healthy(root)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_failing_forecast_stops_the_fix_before_any_restart(tmp_path, version):
    root, data = incident(tmp_path, version)
    pid = lab_daemon_pid(root)
    # A hand-made drop-in, read after the toolkit's, names a default runtime nobody configured.
    (root / "etc/containerd/conf.d/zz-hand.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "crun"\n')
    run = fix(root, *data)
    assert run.code != 0
    assert 'the restart forecast fails: default_runtime_name "crun" has no runtime' in run.log
    assert "nothing was restarted" in run.log
    assert lab_daemon_pid(root) == pid and loaded(root) == ["runc"]
    # The run stopped there: the toolkit is still the stalled upgrade.
    ds = get("daemonset/nvidia-container-toolkit", "gpu-operator")
    assert ds["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "64Gi"
    assert ds["status"]["updatedNumberScheduled"] == 1


def test_bad_input_is_refused_before_any_change(tmp_path):
    root, data = incident(tmp_path, "1.6.20")
    before = tree(root)
    run = fix(root, *data, "toolkit_memory_fix=40Gi")
    assert run.code != 0
    assert ("preflight: toolkit_memory_fix=40Gi does not fit every lab node: compared against each node's "
            "allocatable memory, lab-node-0 32Gi, lab-node-1 32Gi, lab-node-2 32Gi cannot take it; "
            "nothing was changed") in run.log
    run = fix(root, "containerd_binary=/nonexistent/containerd")
    assert run.code != 0
    assert "preflight: the repair restarts the lab's own containerd, and this host has none" in run.log
    assert tree(root) == before
    assert loaded(root) == ["runc"]


def test_a_fix_interrupted_after_the_restart_is_completed_by_the_next(tmp_path):
    root, data = incident(tmp_path, "1.6.20")
    args = [PYINFRA, "inventory.py", "fix.py", "-y", "--data", f"gpuop_root={root}", *sum((["--data", d] for d in data), [])]
    proc = Started(args)
    proc.until("the restarted lab containerd to hold nvidia,runc through CRI: after", RUN_DEADLINE_S)
    proc.proc.send_signal(signal.SIGINT)
    proc.finish(RUN_DEADLINE_S)
    assert crictl_info(root)[0] == 0 and loaded(root) == ["nvidia", "runc"]
    run = fix(root, *data)
    assert run.code == 0, run.log
    assert_healthy(root)
    assert fix(root, *data).changed == 0
