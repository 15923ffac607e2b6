"""Each containerd version against each drop-in, on real daemons: the product's forecast of a
restart (the ``ContainerdRestart`` fact, its real command), then the restart itself, asked through
CRI. ``python -m tests.helpers.matrix`` prints the table the README quotes.

A cell's outcome is one of ``ok <runtimes>`` (CRI answers and holds those handlers), ``fails``
(the daemon runs, its CRI does not answer) or ``refuses-start`` (the daemon exits). The toolkit's
drop-ins are written by each nvidia-ctk of the lab (``NVIDIA_CTK_VERSIONS``) from each source it
takes the config from: ``file`` (the CLI's default: the root config, so the root's version) and
``command`` (the GPU Operator installer's first: ``containerd config dump``, so the version that
binary writes); a cell says the ``version`` the toolkit wrote.
"""

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass

import tomli_w

from gpuop.judgment import configs
from runbook.reach.containerd import ContainerdRestart
from tests.helpers.proc import run


def _listed(name: str) -> list:
    """A list of lab/versions.env, as lab/build.sh reads it."""
    text = open(os.path.join(os.path.dirname(__file__), "../../lab/versions.env")).read()
    return text.split(f'\n{name}="', 1)[1].split('"', 1)[0].split()


VERSIONS = ("1.6.20", *_listed("CONTAINERD_VERSIONS"))
CTK_VERSIONS = tuple(_listed("NVIDIA_CTK_VERSIONS"))
NVIDIA = {
    "runtime_type": "io.containerd.runc.v2",
    "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True},
}

# The drop-ins of the matrix, by name: their text, or (nvidia-ctk's version, its config source) for
# the one that nvidia-ctk writes.
DROPINS = {
    "seed": tomli_w.dumps(configs.nvidia_dropin()),
    **{f"ctk-{v}-{source}": (v, source) for v in CTK_VERSIONS for source in ("file", "command")},
    "version-3": tomli_w.dumps(
        {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {"nvidia": NVIDIA}}}}}
    ),
    "version-4": tomli_w.dumps(
        {"version": 4, "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {"nvidia": NVIDIA}}}}}
    ),
    "default-unconfigured": tomli_w.dumps(
        {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"default_runtime_name": "crun"}}}}
    ),
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
    written: int  # the drop-in's own ``version`` (2 where it says none)

    @property
    def agrees(self) -> bool:
        return self.forecast == self.observed


def outcome(forecast: dict) -> str:
    if not forecast["starts"]:
        return "refuses-start"
    return f"ok {','.join(sorted(forecast['runtimes']))}" if forecast["cri_ok"] else "fails"


def nvidia_ctk_dropin(nvidia_ctk: str, source: str, binary: str, main: str, dropin: str):
    """The drop-in (and main config) the real toolkit CLI writes, as an operator would run it;
    ``source`` ``command``: from ``binary``'s own ``config dump`` (the one on its PATH)."""
    env = {**os.environ, "PATH": f"{os.path.dirname(binary)}:{os.environ['PATH']}"}
    run(
        [
            nvidia_ctk,
            "runtime",
            "configure",
            "--runtime=containerd",
            f"--config={main}",
            f"--drop-in-config={dropin}",
            f"--config-source={source}",
        ],
        timeout_s=60,
        check=True,
        env=env,
    )


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
        proc = subprocess.Popen(
            [
                binary,
                "--config",
                f"{d}/etc/containerd/config.toml",
                "--root",
                f"{d}/root",
                "--state",
                f"{d}/run",
                "--address",
                sock,
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return "refuses-start", last_error(log_path)
            if os.path.exists(sock):
                asked = run(
                    [
                        crictl,
                        "--config",
                        "/dev/null",
                        "--runtime-endpoint",
                        f"unix://{sock}",
                        "--timeout",
                        "3s",
                        "info",
                    ],
                    timeout_s=15,
                )
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
            except Exception:  # noqa: BLE001 (a daemon that does not end at TERM is killed)
                proc.kill()
                proc.wait(5)


def last_error(log_path: str) -> str:
    lines = [
        line
        for line in open(log_path).read().splitlines()
        if "level=error" in line or "level=fatal" in line or "failed" in line
    ]
    return lines[-1][-300:] if lines else ""


def written_version(path: str) -> int:
    """A drop-in's own ``version`` (2 where it says none, or is not TOML)."""
    try:
        with open(path, "rb") as f:
            return int(tomllib.load(f).get("version", 2))
    except tomllib.TOMLDecodeError:
        return 2


def cell(version: str, dropin: str, binary: str, crictl: str, nvidia_ctk, base: str) -> Cell:
    """One cell, on real daemons; ``nvidia_ctk(v)``: the path of nvidia-ctk ``v``."""
    d = os.path.join(base, f"{version}-{dropin}")
    conf = f"{d}/etc/containerd"
    os.makedirs(f"{conf}/conf.d", exist_ok=True)
    main, path = f"{conf}/config.toml", f"{conf}/conf.d/99-nvidia.toml"
    with open(main, "w") as f:
        f.write(tomli_w.dumps(configs.seed_config(f"{conf}/conf.d/*.toml")))
    if isinstance(DROPINS[dropin], tuple):
        ctk, source = DROPINS[dropin]
        nvidia_ctk_dropin(nvidia_ctk(ctk), source, binary, main, path)
    else:
        with open(path, "w") as f:
            f.write(DROPINS[dropin])
    forecast, read = forecast_of(binary, main)
    observed, said = restarted(binary, crictl, d)
    return Cell(
        version,
        dropin,
        outcome(forecast),
        forecast["reason"],
        observed,
        said,
        read.replace(d, "/root/gpuop"),
        written_version(path),
    )


def table(cells) -> list:
    """The docs' table: one row a version, one column a drop-in, the observed outcome (and
    the forecast where it differs); a toolkit's cell says the version it wrote (``v4``)."""
    names = list(DROPINS)
    rows = ["| containerd | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]

    def shown(c: Cell) -> str:
        said = c.observed if c.agrees else f"{c.observed} (forecast: {c.forecast})"
        return f"v{c.written}: {said}" if isinstance(DROPINS[c.dropin], tuple) else said

    for version in VERSIONS:
        got = {c.dropin: c for c in cells if c.version == version}
        shown_cells = [shown(got[n]) if n in got else "" for n in names]
        rows.append(f"| {version} | " + " | ".join(shown_cells) + " |")
    return rows


def recorded(version: str, dropin: str) -> str:
    """Where the unit tests keep a cell's forecast output (``--record``)."""
    return os.path.join(os.path.dirname(__file__), "../unit/data", f"start-{version}-{dropin}.txt")


if __name__ == "__main__":  # the table, as the README shows it; --record: the unit tests' data too
    import tempfile

    from tests.helpers.labcontainerd import binary, crictl, nvidia_ctk_of

    base = tempfile.mkdtemp(prefix="gpuop-matrix-")
    cells = [cell(v, n, binary(v), crictl(), nvidia_ctk_of, base) for v in VERSIONS for n in DROPINS]
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
