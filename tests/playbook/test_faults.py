"""A lab that survives its own faults (issue 17): one lab daemon per root, found by what it is;
a control plane that lost components is healed; nothing waits without an end; a controller
killed at any moment leaves nothing the next run cannot converge.

In each test one rerun (after the fault is lifted, where it is lifted) converges, the run after
changes nothing, the reports equal a fresh run's, and exactly one lab daemon runs per root."""

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.helpers.incident import assert_incident_end_state, lab_files
from tests.helpers.kube import LAB, component_pidfile, eventually, exited, get, lab_up, reset_lab
from tests.helpers.labcontainerd import lab_daemons
from tests.helpers.playbook import (
    CLUSTER_WORDS,
    RUN_DEADLINE_S,
    deploy,
    fresh_incident,
    lab_daemon_pid,
    start,
    stop_daemons_under,
)
from tests.helpers.proc import run

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = fresh_incident(tmp_path_factory, "faults")
    return root, lab_files(root)


def converges(root, fresh, *data):
    """One rerun converges to the incident, and the run after changes nothing."""
    again = deploy(root, *data)
    assert again.code == 0, again.log
    assert_incident_end_state(root, fresh)
    quiet = deploy(root)
    assert quiet.code == 0 and quiet.changed == 0, quiet.changed_ops()
    return again


def test_the_root_removed_while_its_daemon_runs(lab):
    root, fresh = lab
    (orphan,) = lab_daemons(root)
    shutil.rmtree(root)
    reset_lab()  # as a user starting over would, from an empty lab
    run = converges(root, fresh)
    assert exited(orphan), "the orphan of the removed root still runs"
    assert "the lab containerd is not the incident's: its CRI does not answer" in run.log
    assert lab_daemons(root) != [orphan]


def test_the_pid_file_removed(lab):
    root, fresh = lab
    (daemon,) = lab_daemons(root)
    (root / "run/containerd.pid").unlink()
    run = converges(root, fresh)
    assert lab_daemons(root) == [daemon]  # adopted: found by its command line, not restarted
    assert (
        f"the lab containerd pid {daemon} holds {root}/var/lib/containerd and is the incident's, "
        "but its pid file says nothing: adopting it"
    ) in run.log
    assert lab_daemon_pid(root) == daemon


def test_a_second_daemon_on_the_same_root(lab):
    """Two daemons on one root (one started by hand beside the lab's): the rerun stops both and
    starts one, and says so."""
    root, fresh = lab
    (first,) = lab_daemons(root)
    args = open(f"/proc/{first}/cmdline", "rb").read().decode().split("\0")[:-1]
    with open(root / "var/log/containerd.log", "a") as log:
        extra = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    eventually("a second daemon on the root", lambda: len(lab_daemons(root)) == 2)
    run = converges(root, fresh)
    assert f"2 daemons hold its root {root}/var/lib/containerd" in run.log
    assert exited(first) and exited(extra.pid)
    extra.wait(10)


def test_the_daemon_stopped_during_a_run(lab):
    """SIGSTOP'd mid-run: alive, holding its root and socket, answering nothing. The next run
    finds its CRI silent within the deadline, stops it (TERM with CONT, KILL if need be) and
    replays its start."""
    root, fresh = lab
    reset_lab()
    (daemon,) = lab_daemons(root)
    proc = start(root)
    proc.until("Step 5: RuntimeClass and a GPU Pod that cannot schedule", RUN_DEADLINE_S)
    os.kill(daemon, signal.SIGSTOP)
    try:
        proc.finish(RUN_DEADLINE_S)  # steps 5 to 8 do not ask containerd: it may well succeed
        started = time.monotonic()
        run = converges(root, fresh)
        assert time.monotonic() - started < 120
    finally:
        if not exited(daemon):
            os.kill(daemon, signal.SIGCONT)
    assert exited(daemon)
    assert f"the lab containerd is not the incident's: pid {daemon} is stopped" in run.log


def test_the_api_server_stalled_for_20s_during_a_run(lab):
    """The API server stops for 20 s while step 8 waits, then goes on. The run fails within its
    deadline, naming what did not answer. The scheduler and controller-manager lost their leader
    leases (20 s outlives their 10 s renew deadline and 15 s lease) and exited: the next run's
    preflight says so and changes nothing; `make lab-up` starts them again, and a replay then works."""
    root, fresh = lab
    proc = start(root, "toolkit_memory_initial=40Gi", "wait_timeout_s=30")
    proc.until("waiting for all Pods of DaemonSet gpu-operator/nvidia-container-toolkit Ready", RUN_DEADLINE_S)
    apiserver = int(open(component_pidfile("kube-apiserver")).read())
    os.kill(apiserver, signal.SIGSTOP)
    stalled_at = time.monotonic()
    try:
        time.sleep(20)  # the fault itself: an API server that stalls for 20 s
    finally:
        os.kill(apiserver, signal.SIGCONT)
    try:
        log = proc.finish(RUN_DEADLINE_S)
        assert proc.returncode != 0
        assert time.monotonic() - stalled_at < 30 + 45, log[-2000:]
        assert (
            "Every node runs a Ready initial toolkit Pod: timed out after 30s waiting for all Pods "
            "of DaemonSet gpu-operator/nvidia-container-toolkit Ready; last seen: "
        ) in log, log[-3000:]
        for component in ("kube-scheduler", "kube-controller-manager"):
            pid = int(open(component_pidfile(component)).read())
            eventually(f"{component} to exit after losing its lease", lambda: exited(pid), timeout=60)
        refused = deploy(root, "replay=true")
        assert refused.code != 0
        assert (
            f"preflight: the cluster of {CLUSTER_WORDS} answers, but a component is "
            "down: kube-scheduler: its leader lease kube-system/kube-scheduler was last renewed"
        ) in refused.log
        assert "kube-controller-manager: its leader lease" in refused.log and "nothing was changed" in refused.log
    finally:
        healed = run(["lab/lab.sh", "up", LAB], timeout_s=300)
    assert healed.returncode == 0, healed.stderr
    assert "not running: kube-controller-manager kube-scheduler; starting them" in healed.stderr
    assert run(["lab/lab.sh", "status", LAB], timeout_s=60).returncode == 0
    converges(root, fresh, "replay=true")


MOMENTS = {
    "fresh": (
        "Step 2: the toolkit's nvidia drop-in",
        "Step 5: RuntimeClass and a GPU Pod that cannot schedule | Namespace gpu-lab",
        "Step 8: a toolkit upgrade that stalls on memory",
    ),
    "replay": (
        "Replay: reset the lab to before step 1",
        "Step 2: the toolkit's nvidia drop-in",
        "Step 6: advertise GPUs like a device plugin",
    ),
}


@pytest.mark.parametrize("kind,marker", [(k, m) for k, ms in MOMENTS.items() for m in ms])
def test_the_controller_killed_with_sigkill(lab, kind, marker):
    root, fresh = lab
    if kind == "fresh":  # nothing of the lab left: no root, no daemon, no objects
        stop_daemons_under(root)
        shutil.rmtree(root)
        reset_lab()
    proc = start(root, *(("replay=true",) if kind == "replay" else ()))
    proc.until(marker, RUN_DEADLINE_S)
    proc.proc.send_signal(signal.SIGKILL)
    proc.finish(RUN_DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    converges(root, fresh)


def test_lab_down_leaves_no_lab_process_behind(lab, tmp_path_factory):
    """Last: the lab goes down with every lab daemon (one SIGSTOP'd among them), and comes back."""
    root, _ = lab
    (daemon,) = lab_daemons(root)
    os.kill(daemon, signal.SIGSTOP)
    down = run(["lab/lab.sh", "down", LAB], timeout_s=300)
    assert down.returncode == 0, down.stderr
    try:
        assert exited(daemon)
        # no lab daemon left of this process's tests (make test runs a second lab beside them,
        # whose kubelet node's daemon the down spares), found by its command line alone
        pattern = f"--root {tmp_path_factory.getbasetemp()}/[^ ]*/var/lib/containerd --state"
        assert run(["pgrep", "-f", "--", pattern], timeout_s=10).stdout == ""
        assert run(["pgrep", "-f", f"/.kwok/clusters/{LAB}/"], timeout_s=10).stdout == ""
    finally:
        lab_up()
    assert [n["metadata"]["name"] for n in get("nodes")["items"]] == [f"lab-node-{i}" for i in range(3)]
