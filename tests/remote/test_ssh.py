"""The playbook over SSH against real OpenSSH servers on loopback (issue 4)."""

import json
import os

import pytest
import yaml

from tests.helpers.expected import MERGE, NODE_GPU, RESTART, ROLLOUT, SLOTS
from tests.helpers.kube import get, kubectl, reset_lab, set_gpus
from tests.helpers.playbook import deploy, lab_daemon_pid, stop_daemons_under, target_commands, tree
from tests.helpers.proc import run
from tests.helpers.ssh import Sshd, free_port, keygen

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

LABS = {"lab-a": "gpuop-lab", "lab-b": "gpuop-lab-b", "lab-c": "gpuop-lab-c"}
SUDO_USER = "gpuoplab"


@pytest.fixture(scope="module")
def ssh(tmp_path_factory):
    """Three sshd on loopback, a client key they trust, and a known_hosts file for them."""
    base = tmp_path_factory.mktemp("ssh")
    client = keygen(base / "client_ed25519")
    servers = {name: Sshd(str(base / name), free_port()).start([client]) for name in LABS}
    known = base / "known_hosts"
    known.write_text("".join(s.known_hosts_line() + "\n" for s in servers.values()))
    yield {"base": base, "key": str(base / "client_ed25519"), "known_hosts": str(known), "servers": servers}
    for server in servers.values():
        server.stop()


def hosts_file(ssh, path, names, **extra):
    """A hosts file for some of the loopback hosts; each gets its own root and lab context."""
    hosts = {}
    for name in names:
        hosts[name] = {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": ssh["servers"][name].port,
            "gpuop_root": str(ssh["base"] / f"root-{name}"),
            "kube_context": f"kwok-{LABS[name]}",
        }
    defaults = {"ssh_user": "root", "ssh_key": ssh["key"], "ssh_known_hosts_file": ssh["known_hosts"]}
    defaults.update(extra)
    path.write_text(yaml.safe_dump({"defaults": defaults, "hosts": hosts}))
    return {"GPUOP_HOSTS": str(path)}


def root_of(ssh, name):
    return ssh["base"] / f"root-{name}"


def reports(root):
    return {
        name: (root / "out" / name).read_text()
        for name in ("merge.txt", "restart.txt", "node-gpu.txt", "slots.txt", "rollout.txt")
    }


EXPECTED = {
    "merge.txt": MERGE,
    "restart.txt": RESTART,
    "node-gpu.txt": NODE_GPU,
    "slots.txt": SLOTS,
    "rollout.txt": ROLLOUT,
}


def clean(ssh, *names):
    for name in names:
        stop_daemons_under(root_of(ssh, name))
        run(["rm", "-rf", str(root_of(ssh, name))], timeout_s=60, check=True)


def test_deploy_over_ssh_converges_like_local(ssh, tmp_path):
    reset_lab()
    clean(ssh, "lab-a")
    env = hosts_file(ssh, tmp_path / "hosts.yaml", ["lab-a"])
    run = deploy(None, env=env)
    assert run.code == 0, run.log
    root = root_of(ssh, "lab-a")
    assert reports(root) == EXPECTED
    assert (root / "out/unscheduled.txt").read_text().startswith("Unschedulable\n0/3 nodes are")
    assert oct((root / "bin/check-runtime.sh").stat().st_mode & 0o777) == "0o755"
    assert get("pod/cuda-probe", "gpu-lab")["status"]["phase"] == "Running"
    before = tree(root)
    again = deploy(None, env=env, debug=True)
    assert again.code == 0 and again.changed == 0, again.changed_ops()
    assert tree(root) == before
    assert [where for where, _ in target_commands(again.log)] == ["lab-a"] * 2, again.log[
        -3000:
    ]  # lock and read, release


def test_unknown_host_key_is_refused_and_nothing_written(ssh, tmp_path):
    clean(ssh, "lab-a")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    env = hosts_file(ssh, tmp_path / "hosts.yaml", ["lab-a"], ssh_known_hosts_file=str(empty))
    run = deploy(None, env=env)
    assert run.code != 0
    assert "lab-a" in run.log and "host key" in run.log.lower()
    assert not root_of(ssh, "lab-a").exists()
    assert empty.read_text() == ""  # not learnt either


def test_wrong_key_fails_clearly_and_nothing_written(ssh, tmp_path):
    clean(ssh, "lab-a")
    keygen(tmp_path / "stranger")
    env = hosts_file(ssh, tmp_path / "hosts.yaml", ["lab-a"], ssh_key=str(tmp_path / "stranger"))
    run = deploy(None, env=env)
    assert run.code != 0
    assert "lab-a" in run.log and "authentication failed" in run.log.lower()
    assert not root_of(ssh, "lab-a").exists()


def test_password_in_hosts_file_is_refused(ssh, tmp_path):
    env = hosts_file(ssh, tmp_path / "hosts.yaml", ["lab-a"], ssh_password="hunter2")
    run = deploy(None, env=env)
    assert run.code != 0
    assert "ssh_password is refused" in run.log
    assert "hunter2" not in run.log


@pytest.fixture
def sudo_user(ssh):
    run(["useradd", "-m", "-s", "/bin/sh", SUDO_USER], timeout_s=60)
    run(["usermod", "-p", "*", SUDO_USER], timeout_s=60, check=True)  # no password, not locked
    home = os.path.expanduser(f"~{SUDO_USER}")
    os.makedirs(f"{home}/.ssh", exist_ok=True)
    with open(f"{home}/.ssh/authorized_keys", "w") as f:
        f.write(open(ssh["key"] + ".pub").read())
    run(["chown", "-R", f"{SUDO_USER}:", f"{home}/.ssh"], timeout_s=60, check=True)
    rule = f"/etc/sudoers.d/{SUDO_USER}"
    with open(rule, "w") as f:
        f.write(f"{SUDO_USER} ALL=(ALL) NOPASSWD: ALL\n")
    os.chmod(rule, 0o440)
    yield SUDO_USER
    os.remove(rule)
    run(["userdel", "-r", SUDO_USER], timeout_s=60)


def test_non_root_user_works_through_sudo(ssh, tmp_path, sudo_user):
    reset_lab()
    clean(ssh, "lab-a")
    env = hosts_file(ssh, tmp_path / "hosts.yaml", ["lab-a"], ssh_user=sudo_user)
    run = deploy(None, env=env)
    assert run.code == 0, run.log
    root = root_of(ssh, "lab-a")
    assert reports(root) == EXPECTED
    assert (root / "out/merge.txt").stat().st_uid == 0


def lab(command, name):
    """lab/lab.sh for another host's lab; the default lab's context stays the current one."""
    run(["lab/lab.sh", command, LABS[name]], timeout_s=600, check=True)
    kubectl("config", "use-context", "kwok-gpuop-lab")


@pytest.fixture(scope="module")
def three_labs():
    for name in ("lab-b", "lab-c"):
        lab("up", name)
    yield
    for name in ("lab-b", "lab-c"):
        lab("down", name)


def fresh_hosts(ssh, tmp_path, names):
    """Reset labs and empty roots for these hosts, and a hosts file naming them."""
    for name in names:
        reset_lab(context=f"kwok-{LABS[name]}")
    clean(ssh, *names)
    return hosts_file(ssh, tmp_path / "hosts.yaml", names)


def converged_hosts(ssh, tmp_path, names):
    """These hosts at the incident, from whatever an earlier test left (a deploy converges any
    state: a fresh root, a drifted lab or a repaired one), and a hosts file naming them."""
    env = hosts_file(ssh, tmp_path / "hosts.yaml", names)
    run = deploy(None, env=env)
    assert run.code == 0, run.log
    for name in names:
        assert reports(root_of(ssh, name)) == EXPECTED, name
    return env


def test_three_hosts_converge_and_a_broken_one_fails_alone(ssh, tmp_path, three_labs):
    names = list(LABS)
    env = fresh_hosts(ssh, tmp_path, names)
    run = deploy(None, env=env)
    assert run.code == 0, run.log
    for name in names:
        assert reports(root_of(ssh, name)) == EXPECTED, name
    assert deploy(None, env=env).changed == 0

    # lab-c's cluster goes down: it fails alone, before changing anything; the others converge.
    lab("down", "lab-c")
    try:
        for name in ("lab-a", "lab-b"):
            reset_lab(context=f"kwok-{LABS[name]}")
        clean(ssh, *names)
        run = deploy(None, env=env)
    finally:
        lab("up", "lab-c")
    assert run.code != 0
    assert run.doc["results"]["failed_hosts"] == ["lab-c"]
    assert "[lab-c] preflight: the cluster of context kwok-gpuop-lab-c is unreachable" in run.log
    for name in ("lab-a", "lab-b"):
        assert reports(root_of(ssh, name)) == EXPECTED, name
    assert not root_of(ssh, "lab-c").exists()


def test_audit_over_ssh_only_the_drifted_host_differs(ssh, tmp_path, three_labs):
    names = list(LABS)
    env = converged_hosts(ssh, tmp_path, names)
    set_gpus("lab-node-1", 4, context="kwok-gpuop-lab-b")
    run = deploy(None, env=env, script="audit.py")
    assert run.code != 0
    gaps = {n: json.loads((root_of(ssh, n) / "out/audit.json").read_text())["gaps"] for n in names}
    assert gaps["lab-a"] == gaps["lab-c"]
    assert [(g["kind"], g["subject"]) for g in gaps["lab-a"]] == [
        ("restart-takes-cri-down", "containerd"),
        ("handler-not-loaded", "nvidia"),
        ("runtimeclass-handler-not-loaded", "nvidia"),
        ("rollout-stalled", "gpu-operator/nvidia-container-toolkit"),
    ]
    extra = [(g["kind"], g["subject"]) for g in gaps["lab-b"] if g not in gaps["lab-a"]]
    assert extra == [("time-slicing-mismatch", "lab-node-1")]
    assert all(g in gaps["lab-b"] for g in gaps["lab-a"])


def test_fix_over_ssh_repairs_every_host_and_only_its_own_containerd(ssh, tmp_path, three_labs):
    names = list(LABS)
    env = converged_hosts(ssh, tmp_path, names)
    pids = {n: lab_daemon_pid(root_of(ssh, n)) for n in names}
    run = deploy(None, env=env, script="fix.py")
    assert run.code == 0, run.log
    for name in names:
        result = json.loads((root_of(ssh, name) / "out/audit.json").read_text())
        assert result["gaps"] == [], name
        assert sorted(result["handlers"]["loaded"]) == ["nvidia", "runc"], name
        # Each host restarted its own lab containerd once; none of them is another's.
        assert lab_daemon_pid(root_of(ssh, name)) not in pids.values(), name
    assert len({lab_daemon_pid(root_of(ssh, n)) for n in names}) == 3
    again = deploy(None, env=env, script="fix.py")
    assert again.code == 0 and again.changed == 0, again.changed_ops()
