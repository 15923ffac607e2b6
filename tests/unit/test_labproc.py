"""The lab's processes (lab/labproc.py): which is a lab daemon, which node is whose, and a stop
that ends (TERM, then KILL), on real processes."""

import os
import subprocess
import sys
import time
from pathlib import Path

from gpuop.layout import Layout, holds_root
from lab import labproc


def test_a_lab_daemon_is_known_by_its_layout_on_its_command_line():
    lab = [
        "/usr/bin/containerd",
        "--config",
        "/r/etc/containerd/config.toml",
        "--root",
        "/r/var/lib/containerd",
        "--state",
        "/r/run/containerd",
        "--address",
        "/r/run/containerd/containerd.sock",
    ]
    assert Layout.of_daemon(lab) == Layout("/r")
    assert Layout.of_daemon(["/usr/bin/containerd"]) is None  # the host's own, as systemd starts it
    assert (
        Layout.of_daemon(
            [
                "containerd",
                "--root",
                "/var/lib/containerd",
                "--state",
                "/run/containerd",
                "--address",
                "/run/containerd/containerd.sock",
            ]
        )
        is None
    )  # a node's default paths
    # the kubelet node's short-lived importer: the lab's store, a state and socket of its own
    importer = [
        "containerd",
        "--root",
        "/r/var/lib/containerd",
        "--state",
        "/r/var/node/import/state",
        "--address",
        "/r/var/node/import/containerd.sock",
    ]
    assert Layout.of_daemon(importer) is None and holds_root(importer, "/r/var/lib/containerd")
    assert Layout.of_daemon(lab[:-1] + ["/other/run/containerd/containerd.sock"]) is None


def test_a_node_is_its_labs_and_one_that_says_none_is_every_labs(tmp_path):
    a, b, old = tmp_path / "a", tmp_path / "b", tmp_path / "old"
    for d in (a, b, old):
        d.mkdir()
    (a / "lab").write_text("gpuop-lab\n")
    (b / "lab").write_text("gpuop-lab-beside\n")
    dirs = [str(a), str(b), str(old)]
    assert labproc.mine(dirs, "gpuop-lab") == [str(a), str(old)]
    assert labproc.mine(dirs, "gpuop-lab-beside") == [str(b), str(old)]


def _lab_daemon(root, env) -> subprocess.Popen:
    """A process with a lab daemon's command line on ``root`` (a sleep: no containerd needed),
    started with ``env``; returned once its command line reads as one, within 10 s."""
    layout = [
        "--root",
        f"{root}/var/lib/containerd",
        "--state",
        f"{root}/run/containerd",
        "--address",
        f"{root}/run/containerd/containerd.sock",
    ]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *layout], env=env)
    deadline = time.monotonic() + 10
    while not Layout.of_daemon(Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode().split("\0")):
        assert time.monotonic() < deadline, "the stand-in daemon did not start within 10s"
        time.sleep(0.01)
    return proc


def test_a_labs_down_spares_the_daemons_started_for_another_lab(tmp_path):
    """make test's second lane starts its daemons under GPUOP_LAB: the lab lane's `down` leaves
    them be (it stopped them mid-test before), and stops those started for no lab or for it."""
    env = {k: v for k, v in os.environ.items() if k != "GPUOP_LAB"}
    mine, beside, unnamed = (
        _lab_daemon(tmp_path / name, {**env, **extra})
        for name, extra in (
            ("mine", {"GPUOP_LAB": "gpuop-lab"}),
            ("beside", {"GPUOP_LAB": "gpuop-lab-beside"}),
            ("unnamed", {}),
        )
    )
    try:
        assert labproc.started_for(beside.pid) == "gpuop-lab-beside" and labproc.started_for(unnamed.pid) == ""
        ours = {mine.pid, beside.pid, unnamed.pid}
        assert ours & set(labproc.daemons("gpuop-lab")) == {mine.pid, unnamed.pid}
        assert ours & set(labproc.daemons("gpuop-lab-beside")) == {beside.pid, unnamed.pid}
    finally:
        for proc in (mine, beside, unnamed):
            proc.kill()
            proc.wait(5)


def _sleeper(ignore_term: bool) -> subprocess.Popen:
    """A process that takes TERM, or ignores it; returned once it has exec'd its sleep (its trap
    set), within 10 s."""
    trap = "trap '' TERM; " if ignore_term else ""
    proc = subprocess.Popen(["sh", "-c", f"{trap}exec sleep 60"])
    deadline = time.monotonic() + 10
    while open(f"/proc/{proc.pid}/cmdline", "rb").read() != b"sleep\x0060\x00":
        assert time.monotonic() < deadline, "the sleeper did not start within 10s"
        time.sleep(0.01)
    return proc


def test_stop_takes_term_and_kills_what_ignores_it_after_its_grace():
    polite, deaf = _sleeper(False), _sleeper(True)
    started = time.monotonic()
    killed = labproc.stop("two sleepers", [polite.pid, deaf.pid], grace_s=1)
    took = time.monotonic() - started
    assert killed == [deaf.pid]
    assert polite.wait(5) == -15 and deaf.wait(5) == -9
    assert 1 <= took < 5, took


def test_stop_leaves_out_what_is_gone_and_says_what_it_stopped():
    gone = subprocess.Popen(["true"])
    gone.wait()
    polite = _sleeper(False)
    said = subprocess.run(
        [sys.executable, "lab/labproc.py", "stop", "--grace=2", "a sleeper", str(gone.pid), str(polite.pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert said.returncode == 0, said.stderr
    assert said.stderr == f"stopped a sleeper (pid {polite.pid})\n"
    assert polite.wait(5) == -15
