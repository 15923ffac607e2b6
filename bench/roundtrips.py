"""Benchmark: round trips and wall time of each entry point, on @local and over SSH, 1 and 3 hosts.

    .venv/bin/python bench/roundtrips.py [ROUNDS]

Targets:
- @local;
- SSH as a plain user whose login shell is /bin/sh, through passwordless sudo;
- SSH as a root login (uid 0, its own home) whose bash sources a .bashrc doing ~150 ms of real
  work per command, as a login shell with `pyenv init` does: every command pays it.
Each SSH host is a real sshd on loopback with its own lab cluster (gpuop-lab, -b, -c) and root.

Per round and target: a fresh run from reset labs (timed with --debug, which counts its
commands), then a converged rerun and an audit (timed, then counted in a --debug run of their
own). pyinfra's floor, an empty deploy with one `server.shell` of `true` on @local, is timed
before each rerun, interleaved, since this machine is shared and absolute times drift.
Prints one table of medians, then where the CPU of the reruns and audits went: the controller's
(pyinfra and, on @local, the commands it runs) and the whole machine's, whose difference over SSH
is the lab hosts' side (sshd, sudo, kubectl, containerd, the API servers), here on the same cores.
"""

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import yaml  # noqa: E402

from tests.helpers.kube import kubectl, reset_lab  # noqa: E402
from tests.helpers.playbook import PYINFRA, stop_daemons_under  # noqa: E402
from tests.helpers.ssh import Sshd, free_port, keygen  # noqa: E402

LABS = {"lab-a": "gpuop-lab", "lab-b": "gpuop-lab-b", "lab-c": "gpuop-lab-c"}
PLAIN, HEAVY = "gpuop-bench", "gpuop-root"
COMMAND = re.compile(r"Running command on ")


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def login(name, shell, uid0, pubkey, home, rc=""):
    """A login trusting the bench key: a /bin/sh user with sudo, or a second uid-0 login."""
    extra = ["-o", "-u", "0", "-g", "0"] if uid0 else []
    subprocess.run(["useradd", *extra, "-M", "-d", home, "-s", shell, name], check=True)
    subprocess.run(["usermod", "-p", "*", name], check=True)
    os.makedirs(f"{home}/.ssh", exist_ok=True)
    with open(f"{home}/.ssh/authorized_keys", "w") as f:
        f.write(pubkey + "\n")
    if rc:
        with open(f"{home}/.bashrc", "w") as f:
            f.write(rc)
    if uid0:  # root's kubeconfig: the lab clusters' contexts
        os.symlink(os.path.expanduser("~root/.kube"), f"{home}/.kube")
    subprocess.run(["chown", "-R", f"{name}:", home], check=True)
    if not uid0:
        with open(f"/etc/sudoers.d/{name}", "w") as f:
            f.write(f"{name} ALL=(ALL) NOPASSWD: ALL\n")
        os.chmod(f"/etc/sudoers.d/{name}", 0o440)


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def heavy_rc(target_s=0.15):
    """A .bashrc that does ~``target_s`` of work (a counting loop, calibrated here)."""
    loops = 20000
    start = time.monotonic()
    subprocess.run(["bash", "-c", f"i=0; while [ $i -lt {loops} ]; do i=$((i+1)); done"], check=True)
    loops = int(loops * target_s / (time.monotonic() - start))
    return f"# gpuop bench: a shell start-up that does real work\ni=0; while [ $i -lt {loops} ]; do i=$((i+1)); done\n"


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def busy_cpu_s():
    """CPU seconds the whole machine has spent busy since boot (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def children_cpu_s():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def pyinfra(inventory, script, env, data=(), debug=False):
    """(wall s, the run, its own CPU s with its children's, the machine's busy CPU s meanwhile)."""
    args = [PYINFRA, inventory, script, "-y", *(["--debug"] if debug else [])]
    for item in data:
        args += ["--data", item]
    start, own, machine = time.monotonic(), children_cpu_s(), busy_cpu_s()
    result = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **env})
    return (time.monotonic() - start, result, children_cpu_s() - own, busy_cpu_s() - machine)


def _pair(runs) -> str:
    """The medians of pyinfra's CPU and of the whole run's, ``runs`` being (pyinfra, all) pairs."""
    return f"{statistics.median(o for o, _ in runs):.2f} / {statistics.median(m for _, m in runs):.2f}"


def main(rounds):
    base = tempfile.mkdtemp(prefix="gpuop-bench-rt-")
    os.chmod(base, 0o755)  # the logins' homes are in it
    key = os.path.join(base, "client")
    client = keygen(key)
    servers = {n: Sshd(os.path.join(base, n), free_port()).start([client]) for n in LABS}
    login(PLAIN, "/bin/sh", False, client, os.path.join(base, "home-plain"))
    login(HEAVY, "/bin/bash", True, client, os.path.join(base, "home-heavy"), heavy_rc())
    known = os.path.join(base, "known_hosts")
    with open(known, "w") as f:
        f.writelines(s.known_hosts_line() + "\n" for s in servers.values())
    for lab in ("gpuop-lab-b", "gpuop-lab-c"):
        subprocess.run(["lab/lab.sh", "up", lab], check=True, capture_output=True)
    kubectl("config", "use-context", "kwok-gpuop-lab")
    floor = os.path.join(base, "floor.py")
    with open(floor, "w") as f:
        f.write('from pyinfra.operations import server\nserver.shell(name="floor", commands=["true"])\n')

    def target(user, names):
        """(inventory, env, data, roots) for a run against ``names`` as ``user`` (None: @local)."""
        if user is None:
            root = os.path.join(base, "root-local")
            return "@local", {}, (f"gpuop_root={root}",), {"lab-a": root}
        path = os.path.join(base, f"hosts-{user}-{len(names)}.yaml")
        roots = {n: os.path.join(base, f"root-{user}-{n}") for n in names}
        doc = {
            "defaults": {
                "ssh_user": user,
                "ssh_key": key,
                "ssh_known_hosts_file": known,
                **({"_sudo": False} if user == HEAVY else {}),
            },
            "hosts": {
                n: {
                    "ssh_hostname": "127.0.0.1",
                    "ssh_port": servers[n].port,
                    "gpuop_root": roots[n],
                    "kube_context": f"kwok-{LABS[n]}",
                }
                for n in names
            },
        }
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
        return "inventory.py", {"GPUOP_HOSTS": path}, (), roots

    configs = [
        ("@local", None, ["lab-a"]),
        ("SSH /bin/sh user", PLAIN, ["lab-a"]),
        ("SSH /bin/sh user", PLAIN, list(LABS)),
        ("SSH root, heavy .bashrc", HEAVY, ["lab-a"]),
        ("SSH root, heavy .bashrc", HEAVY, list(LABS)),
    ]
    seen = {}  # (config index, what) -> [(seconds, commands per host)]
    cpu = {}  # (config index, what) -> [(controller CPU s, machine CPU s)]
    floors, idle = [], []

    def record(i, what, seconds, commands, hosts):
        seen.setdefault((i, what), []).append((seconds, commands / hosts))

    try:
        for r in range(1, rounds + 1):
            for i, (label, user, names) in enumerate(configs):
                inventory, env, data, roots = target(user, names)
                for n in names:
                    stop_daemons_under(roots[n])
                    shutil.rmtree(roots[n], ignore_errors=True)
                    reset_lab(context=f"kwok-{LABS[n]}")
                t, fresh, _, _ = pyinfra(inventory, "deploy.py", env, data, debug=True)
                if fresh.returncode != 0:
                    raise SystemExit(fresh.stderr[-3000:])
                record(i, "fresh", t, len(COMMAND.findall(fresh.stderr)), len(names))
                floors.append(pyinfra("@local", floor, {})[0])
                start, machine = time.monotonic(), busy_cpu_s()
                time.sleep(1)  # the machine's own load meanwhile: the lab clusters, anything else
                idle.append((busy_cpu_s() - machine) / (time.monotonic() - start))
                for what, script, ok in (("rerun", "deploy.py", True), ("audit", "audit.py", False)):
                    t, timed, own, machine = pyinfra(inventory, script, env, data)
                    counted = pyinfra(inventory, script, env, data, debug=True)[1]
                    if (timed.returncode == 0) != ok:
                        raise SystemExit(timed.stderr[-3000:])
                    record(i, what, t, len(COMMAND.findall(counted.stderr)), len(names))
                    cpu.setdefault((i, what), []).append((own, machine))
                print(f"round {r}: {label}, {len(names)} host(s) done", file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.stop()
        for name in (PLAIN, HEAVY):
            subprocess.run(["userdel", "-f", name], capture_output=True)
            if os.path.exists(f"/etc/sudoers.d/{name}"):
                os.remove(f"/etc/sudoers.d/{name}")
        for lab in ("gpuop-lab-b", "gpuop-lab-c"):
            subprocess.run(["lab/lab.sh", "down", lab], capture_output=True)
        kubectl("config", "use-context", "kwok-gpuop-lab")
        stop_daemons_under(base)
        shutil.rmtree(base, ignore_errors=True)

    def cell(i, what):
        runs = seen[(i, what)]
        return statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs)

    floor_s = statistics.median(floors)
    print(f"\npyinfra floor (empty deploy, one `true`, @local): {floor_s:.2f}s; medians of {rounds} round(s)")
    print(f"{'target':<26}{'hosts':>6}{'fresh run':>18}{'converged rerun':>20}{'audit':>18}")
    for i, (label, _, names) in enumerate(configs):
        cells = [cell(i, w) for w in ("fresh", "rerun", "audit")]
        print(
            f"{label:<26}{len(names):>6}"
            + "".join(f"{f'{s:.2f}s, {c:.0f} cmds':>{w}}" for (s, c), w in zip(cells, (18, 20, 18)))
        )
    local, heavy1 = cell(0, "rerun")[0], cell(3, "rerun")[0]
    print(
        f"rerun: heavy-shell SSH / @local {heavy1 / local:.2f}x (target <= 1.5); "
        f"@local / floor {local / floor_s:.2f}x (target <= 1.6)"
    )
    for what in ("rerun", "audit"):
        for one, three in ((1, 2), (3, 4)):
            print(
                f"{what}, {configs[one][0]}: 3 hosts / 1 host "
                f"{cell(three, what)[0] / cell(one, what)[0]:.2f}x (target <= 1.25)"
            )
    print(
        f"\nCPU seconds, medians; {os.cpu_count()} cores, busy {statistics.median(idle):.2f} of them "
        "with no run (the lab clusters, anything else)"
    )
    print(f"{'target':<26}{'hosts':>6}{'rerun: pyinfra / all':>24}{'audit: pyinfra / all':>24}")
    for i, (label, _, names) in enumerate(configs):
        print(f"{label:<26}{len(names):>6}" + "".join(f"{_pair(cpu[(i, w)]):>24}" for w in ("rerun", "audit")))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
