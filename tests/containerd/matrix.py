"""Each containerd version against each drop-in, on real daemons: the product's forecast of a
restart (the ``ContainerdRestart`` fact, its real command), then the restart itself, asked through
CRI. ``python -m tests.containerd.matrix`` prints the table the README quotes.

A cell's outcome is one of ``ok <runtimes>`` (CRI answers and holds those handlers), ``fails``
(the daemon runs, its CRI does not answer) or ``refuses-start`` (the daemon exits).
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import tomli_w

from facts.containerd import ContainerdRestart
from gpuop import containerd
from tests.helpers.proc import run

VERSIONS = ("1.6.20", *open(os.path.join(os.path.dirname(__file__), "../../lab/versions.env")).read()
            .split('CONTAINERD_VERSIONS="', 1)[1].split('"', 1)[0].split())
NVIDIA = {"runtime_type": "io.containerd.runc.v2",
          "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}}

# The drop-ins of the matrix, by name: (text, or None for the one nvidia-ctk writes).
DROPINS = {
    "seed": tomli_w.dumps(containerd.nvidia_dropin()),
    "nvidia-ctk": None,
    "version-3": tomli_w.dumps({"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {
        "containerd": {"runtimes": {"nvidia": NVIDIA}}}}}),
    "default-unconfigured": tomli_w.dumps({"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {
        "containerd": {"default_runtime_name": "crun"}}}}),
    "invalid-toml": "this is [not valid toml\n",
}
START_DEADLINE_S = 20  # a daemon that neither answers nor exits by then fails the cell


@dataclass
class Cell:
    version: str
    dropin: str
    forecast: str  # the product's forecast, as an outcome
    reason: str  # the forecast's reason (its version's rule)
    observed: str  # what the restart did
    said: str  # the daemon's own words when it failed
    read: str  # what the forecast's command printed on the target (the unit tests' data)

    @property
    def agrees(self) -> bool:
        return self.forecast == self.observed


def outcome(forecast: dict) -> str:
    if not forecast["starts"]:
        return "refuses-start"
    return f"ok {','.join(sorted(forecast['runtimes']))}" if forecast["cri_ok"] else "fails"


def nvidia_ctk_dropin(nvidia_ctk: str, main: str, dropin: str):
    """The drop-in (and main config) the real toolkit CLI writes, as an operator would run it."""
    run([nvidia_ctk, "runtime", "configure", "--runtime=containerd", f"--config={main}",
         f"--drop-in-config={dropin}", "--config-source=file"], timeout_s=60, check=True)


def forecast_of(binary: str, config: str) -> tuple:
    """The product's forecast, and the output it was made from: the ContainerdRestart fact's own
    command and parsing."""
    fact = ContainerdRestart()
    out = run(["sh", "-c", fact.command(binary=binary, config=config)], timeout_s=90)
    return fact.process(out.stdout.splitlines()), out.stdout


def restarted(binary: str, crictl: str, d: str) -> tuple:
    """Start the daemon on the files as they are (a restart) and see what it does; stop it."""
    sock = f"{d}/run/containerd.sock"
    log_path = f"{d}/containerd.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([binary, "--config", f"{d}/etc/containerd/config.toml", "--root",
                                 f"{d}/root", "--state", f"{d}/run", "--address", sock],
                                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return "refuses-start", last_error(log_path)
            if os.path.exists(sock):
                asked = run([crictl, "--config", "/dev/null", "--runtime-endpoint", f"unix://{sock}",
                             "--timeout", "3s", "info"], timeout_s=15)
                if asked.returncode == 0:
                    handlers = json.loads(asked.stdout)["config"]["containerd"]["runtimes"]
                    return f"ok {','.join(sorted(handlers))}", ""
                if "connect: " not in asked.stderr:  # it answers, without CRI
                    return "fails", last_error(log_path)
            time.sleep(0.2)
        return "no answer", last_error(log_path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
                proc.wait(5)


def last_error(log_path: str) -> str:
    lines = [line for line in open(log_path).read().splitlines()
             if "level=error" in line or "level=fatal" in line or "failed" in line]
    return lines[-1][-300:] if lines else ""


def cell(version: str, dropin: str, binary: str, crictl: str, nvidia_ctk: str, base: str) -> Cell:
    d = os.path.join(base, f"{version}-{dropin}")
    conf = f"{d}/etc/containerd"
    os.makedirs(f"{conf}/conf.d", exist_ok=True)
    main = f"{conf}/config.toml"
    with open(main, "w") as f:
        f.write(tomli_w.dumps(containerd.seed_config(f"{conf}/conf.d/*.toml")))
    if DROPINS[dropin] is None:
        nvidia_ctk_dropin(nvidia_ctk, main, f"{conf}/conf.d/99-nvidia.toml")
    else:
        with open(f"{conf}/conf.d/99-nvidia.toml", "w") as f:
            f.write(DROPINS[dropin])
    forecast, read = forecast_of(binary, main)
    observed, said = restarted(binary, crictl, d)
    return Cell(version, dropin, outcome(forecast), forecast["reason"], observed, said,
                read.replace(d, "/root/gpuop"))


def table(cells) -> list:
    """The README's table: one row a version, one column a drop-in, the observed outcome (and
    the forecast where it differs)."""
    names = list(DROPINS)
    rows = ["| containerd | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for version in VERSIONS:
        got = {c.dropin: c for c in cells if c.version == version}
        shown = [(got[n].observed if got[n].agrees else f"{got[n].observed} (forecast: {got[n].forecast})")
                 if n in got else "" for n in names]
        rows.append(f"| {version} | " + " | ".join(shown) + " |")
    return rows


def recorded(version: str, dropin: str) -> str:
    """Where the unit tests keep a cell's forecast output (``--record``)."""
    return os.path.join(os.path.dirname(__file__), "../unit/data", f"start-{version}-{dropin}.txt")


if __name__ == "__main__":  # the table, as the README shows it; --record: the unit tests' data too
    import tempfile

    from tests.helpers.labcontainerd import binary, crictl, nvidia_ctk
    base = tempfile.mkdtemp(prefix="gpuop-matrix-")
    cells = [cell(v, n, binary(v), crictl(), nvidia_ctk(), base) for v in VERSIONS for n in DROPINS]
    print(f"containerd restart matrix, {time.strftime('%Y-%m-%d')}: observed outcome per cell")
    print("\n".join(table(cells)))
    if "--record" in sys.argv:
        for c in cells:
            with open(recorded(c.version, c.dropin), "w") as f:
                f.write(c.read)
    bad = [c for c in cells if not c.agrees]
    print(f"{len(cells) - len(bad)} of {len(cells)} forecasts equal the restart")
    for c in bad:
        print(f"MISMATCH {c.version} {c.dropin}: forecast {c.forecast} ({c.reason}), observed {c.observed}: {c.said}")
    sys.exit(1 if bad else 0)
