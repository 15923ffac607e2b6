"""Benchmark: wall time of the playbook over SSH against three lab hosts at once, against one.

    .venv/bin/python bench/hosts.py [ROUNDS]

Each host is a real sshd on loopback with its own lab cluster (gpuop-lab, gpuop-lab-b,
gpuop-lab-c) and its own root; a fresh run starts from reset labs, a converged run follows it.
Target: three hosts within 1.5x of one.

Logins are as a user whose login shell is /bin/sh, through passwordless sudo (created for the
run, removed after): sshd runs every command through the login shell, and root's bash here
sources a .bashrc that runs `pyenv init` (about 140 ms of CPU per command), which would measure
this machine's shell setup rather than the playbook. BENCH_SSH_USER=root measures that too.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import yaml  # noqa: E402

from tests.kube import kubectl, reset_lab  # noqa: E402
from tests.playbook import deploy  # noqa: E402
from tests.ssh import Sshd, free_port, keygen  # noqa: E402

LABS = {"lab-a": "gpuop-lab", "lab-b": "gpuop-lab-b", "lab-c": "gpuop-lab-c"}
USER = os.environ.get("BENCH_SSH_USER", "gpuop-bench")


def lean_user(pubkey):
    """A login whose shell is /bin/sh, trusting the bench key, with passwordless sudo."""
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", USER], capture_output=True)
    subprocess.run(["usermod", "-p", "*", USER], check=True)
    home = os.path.expanduser(f"~{USER}")
    os.makedirs(f"{home}/.ssh", exist_ok=True)
    with open(f"{home}/.ssh/authorized_keys", "w") as f:
        f.write(pubkey + "\n")
    subprocess.run(["chown", "-R", f"{USER}:", f"{home}/.ssh"], check=True)
    with open(f"/etc/sudoers.d/{USER}", "w") as f:
        f.write(f"{USER} ALL=(ALL) NOPASSWD: ALL\n")
    os.chmod(f"/etc/sudoers.d/{USER}", 0o440)


def drop_user():
    os.remove(f"/etc/sudoers.d/{USER}")
    subprocess.run(["userdel", "-r", USER], capture_output=True)


def timed(env, script="deploy.py", ok=True):
    start = time.monotonic()
    run = deploy(None, env=env, script=script)
    if (run.code == 0) != ok:
        raise SystemExit(run.log)
    return time.monotonic() - start


def main(rounds):
    base = tempfile.mkdtemp(prefix="gpuop-bench-hosts-")
    client = keygen(os.path.join(base, "client"))
    servers = {n: Sshd(os.path.join(base, n), free_port()).start([client]) for n in LABS}
    if USER != "root":
        lean_user(client)
    known = os.path.join(base, "known_hosts")
    with open(known, "w") as f:
        f.writelines(s.known_hosts_line() + "\n" for s in servers.values())
    for lab in ("gpuop-lab-b", "gpuop-lab-c"):
        subprocess.run(["lab/lab.sh", "up", lab], check=True, capture_output=True)
    kubectl("config", "use-context", "kwok-gpuop-lab")

    def hosts(names):
        path = os.path.join(base, f"hosts-{len(names)}.yaml")
        doc = {"defaults": {"ssh_user": USER, "ssh_key": os.path.join(base, "client"),
                            "ssh_known_hosts_file": known},
               "hosts": {n: {"ssh_hostname": "127.0.0.1", "ssh_port": servers[n].port,
                             "gpuop_root": os.path.join(base, "root-" + n),
                             "kube_context": f"kwok-{LABS[n]}"} for n in names}}
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
        return {"GPUOP_HOSTS": path}

    try:
        for i in range(1, rounds + 1):
            for names in (["lab-a"], list(LABS)):
                for n in names:
                    reset_lab(context=f"kwok-{LABS[n]}")
                    subprocess.run(["rm", "-rf", os.path.join(base, "root-" + n)], check=True)
                fresh = timed(hosts(names))
                converged = timed(hosts(names))
                audit = timed(hosts(names), "audit.py", ok=False)  # the incident has gaps
                print(f"round {i}: {len(names)} host(s) as {USER}: fresh run {fresh:.2f}s, "
                      f"converged rerun {converged:.2f}s, audit {audit:.2f}s", flush=True)
    finally:
        if USER != "root":
            drop_user()
        for s in servers.values():
            s.stop()
        for lab in ("gpuop-lab-b", "gpuop-lab-c"):
            subprocess.run(["lab/lab.sh", "down", lab], capture_output=True)
        kubectl("config", "use-context", "kwok-gpuop-lab")
        shutil.rmtree(base)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
