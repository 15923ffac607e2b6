"""From incident to healthy with fix.py, verified live, and back with deploy.py (issue 10).

Every test runs on the real lab cluster and a real lab containerd, with every version the lab
offers: Debian's 1.6.20 and each of lab/versions.env built from its Go module. The module shares
one lab root: each test brings it to the incident on the containerd it needs by a rerun of
deploy.py that switches the binary, as an operator moving a node to another containerd would.
"""

import json
import signal

import pytest

from tests.helpers.expected import MERGE, NODE_GPU, ROLLOUT, SLOTS
from tests.helpers.kube import get, lab_up, reset_lab
from tests.helpers.labcontainerd import binary, crictl_info, loaded, nvidia_ctk
from tests.helpers.matrix import VERSIONS as VERSIONS_OF_THE_LAB
from tests.helpers.playbook import PYINFRA, RUN_DEADLINE_S, deploy, lab_daemon_pid, target_commands, tree
from tests.helpers.proc import Started

pytestmark = [pytest.mark.lab, pytest.mark.every_containerd]  # see pytest.ini

VERSIONS = VERSIONS_OF_THE_LAB  # every containerd the lab offers
REPORTS = {"merge.txt": MERGE, "node-gpu.txt": NODE_GPU, "slots.txt": SLOTS, "rollout.txt": ROLLOUT}


def fix(root, *data, debug=False, ctk=True):
    """fix.py, with the lab's nvidia-ctk (``ctk``), or none on the host."""
    tool = nvidia_ctk() if ctk else "/nonexistent/nvidia-ctk"
    return deploy(root, *data, f"nvidia_ctk_binary={tool}", script="fix.py", debug=debug)


def audit(root, *data):
    return deploy(root, *data, script="audit.py")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The module's lab root, on a lab cluster as `make lab-up` leaves it: the first test's run
    into it is a fresh incident."""
    lab_up()  # in its lane, the kubelet node's or the fleet's tests ran before: kwok's nodes again
    reset_lab()
    return tmp_path_factory.mktemp("fix") / "gpuop"


def incident(root, version):
    """The incident on containerd ``version``, from whatever state the last test left (a
    repaired lab, or another containerd): deploy.py converges it back."""
    data = (f"containerd_binary={binary(version)}",)
    run = deploy(root, *data)
    assert run.code == 0, run.log
    assert loaded(root) == ["runc"]
    assert f"CONTAINERD_VERSION={version}\n" in (root / "out/restart.txt").read_text()
    return root, data


def backups(root) -> set:
    return set((root / "etc/containerd/conf.d").glob("99-nvidia.toml.gpuop-bak.*"))


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
def test_incident_fixed_then_back(lab, version):
    root, data = incident(lab, version)
    fresh = {name: (root / "out" / name).read_text() for name in (*REPORTS, "unscheduled.txt")}
    dropin = (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    kept = backups(root)
    one_x = version.startswith("1.")

    run = fix(root, *data)
    assert run.code == 0, run.log
    # On 1.x the toolkit's CLI writes the drop-in, as an operator would, and the forecast judges it.
    assert ("wrote " in run.log and "the restart forecast loads nvidia,runc with CRI ok" in run.log) == one_x
    assert_healthy(root)
    assert "no gap: written is loaded is scheduled" in run.log
    result = json.loads((root / "out/audit.json").read_text())
    assert result["handlers"]["written"] == ["runc", "nvidia"]
    assert sorted(result["handlers"]["loaded"]) == sorted(result["handlers"]["after_restart"]) == ["nvidia", "runc"]
    assert result["handlers"]["restart_cri"] == "ok"
    assert [w["kind"] for w in result["warnings"]] == ["time-sliced-memory-shared"]
    # On 1.x the drop-in is replaced by one carrying the CRI section, the old one kept; on 2.x
    # the toolkit's minimal drop-in already survives the merge and stays as it is.
    assert [b.read_text() for b in backups(root) - kept] == ([dropin] if one_x else [])
    now = (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert ('default_runtime_name = "runc"' in now) == one_x
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
    assert ("restart-takes-cri-down" in gaps) == one_x

    assert fix(root, *data).code == 0
    assert_healthy(root)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_failing_forecast_stops_the_fix_before_any_restart(lab, version):
    root, data = incident(lab, version)
    pid = lab_daemon_pid(root)
    # A hand-made drop-in, read after the toolkit's, names a default runtime nobody configured.
    hand = root / "etc/containerd/conf.d/zz-hand.toml"
    hand.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "crun"\n')
    try:
        run = fix(root, *data)
    finally:
        hand.unlink()  # the operator takes it back: the next test's lab has none
    assert run.code != 0
    assert 'the restart forecast fails: default_runtime_name "crun" has no runtime' in run.log
    assert "nothing was restarted" in run.log
    assert lab_daemon_pid(root) == pid and loaded(root) == ["runc"]
    # The run stopped there: the toolkit is still the stalled upgrade.
    ds = get("daemonset/nvidia-container-toolkit", "gpu-operator")
    assert ds["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "64Gi"
    assert ds["status"]["updatedNumberScheduled"] == 1


def test_without_nvidia_ctk_or_with_one_whose_drop_in_would_not_load_gpuop_writes_its_own(lab, tmp_path):
    root, data = incident(lab, "1.6.20")
    run = fix(root, *data, ctk=False)
    assert run.code == 0, run.log
    assert "no /nonexistent/nvidia-ctk on this host: writing gpuop's own drop-in for containerd 1.6.20" in run.log
    assert_healthy(root)
    # A toolkit CLI that writes a drop-in the restart would not load: judged before any restart.
    root, data = incident(lab, "1.6.20")
    bad = tmp_path / "bad-nvidia-ctk"
    bad.write_text(
        "#!/bin/sh\nfor a; do case $a in --drop-in-config=*) f=${a#*=};; esac; done\n"
        'printf \'version = 2\\n[plugins."io.containerd.grpc.v1.cri".containerd]\\n'
        'default_runtime_name = "crun"\\n\' >"$f"\n'
    )
    bad.chmod(0o755)
    pid = lab_daemon_pid(root)
    run = deploy(root, *data, f"nvidia_ctk_binary={bad}", script="fix.py")
    assert run.code == 0, run.log
    assert (
        f'what {bad} wrote would not load (default_runtime_name "crun" has no runtime in '
        "containerd.runtimes (configured: runc)"
    ) in run.log
    assert lab_daemon_pid(root) != pid  # restarted once, on gpuop's drop-in
    assert_healthy(root)


def test_bad_input_is_refused_before_any_change(lab):
    root, data = incident(lab, "1.6.20")
    before = tree(root)
    run = fix(root, *data, "toolkit_memory_fix=40Gi")
    assert run.code != 0
    assert (
        "preflight: toolkit_memory_fix=40Gi does not fit every lab node: compared against each node's "
        "allocatable memory, lab-node-0 32Gi, lab-node-1 32Gi, lab-node-2 32Gi cannot take it; "
        "nothing was changed"
    ) in run.log
    run = fix(root, "containerd_binary=/nonexistent/containerd")
    assert run.code != 0
    assert "preflight: the repair restarts the lab's own containerd, and this host has none" in run.log
    assert tree(root) == before
    assert loaded(root) == ["runc"]


def test_a_fix_interrupted_after_the_restart_is_completed_by_the_next(lab):
    root, data = incident(lab, "1.6.20")
    args = [
        PYINFRA,
        "inventory.py",
        "fix.py",
        "-y",
        "--data",
        f"gpuop_root={root}",
        *sum((["--data", d] for d in data), []),
    ]
    proc = Started(args)
    proc.until("the restarted lab containerd to hold nvidia,runc through CRI: after", RUN_DEADLINE_S)
    proc.proc.send_signal(signal.SIGINT)
    proc.finish(RUN_DEADLINE_S)
    assert crictl_info(root)[0] == 0 and loaded(root) == ["nvidia", "runc"]
    run = fix(root, *data)
    assert run.code == 0, run.log
    assert_healthy(root)
    assert fix(root, *data).changed == 0
