"""The lab node's containerd daemon: private to the lab, and held at the incident's moment."""

import posixpath
import shlex
import tomllib
from dataclasses import dataclass
from datetime import datetime

import tomli_w
from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from facts.containerd import LabContainerd
from gpuop.containerd import repaired_dropin, runtime_names

from . import reads
from .files import text
from .poll import failure, until


@dataclass(frozen=True)
class LabDaemon:
    """Where one lab's containerd lives: its binary, config, and its own socket, state, root, pid
    and log, so that it never touches a containerd the host runs, nor /etc/containerd.

        LabDaemon("/usr/bin/containerd", "crictl", ".../config.toml", ".../containerd.sock",
                  ".../run/containerd", ".../var/lib/containerd", ".../containerd.pid", ".../containerd.log")
    """

    binary: str
    crictl: str
    config: str
    socket: str
    state: str
    root: str
    pidfile: str
    log: str

    def args(self) -> list:
        """The daemon's command line: the lab's config, and its own root, state and socket."""
        return [self.binary, "--config", self.config, "--root", self.root, "--state", self.state,
                "--address", self.socket]

    def loaded(self) -> dict:
        """The loaded view, live (for waits): the daemon and what it holds, through CRI."""
        return host.get_fact(LabContainerd, pidfile=self.pidfile, socket=self.socket, crictl=self.crictl)

    def start(self) -> StringCommand:
        """Start the daemon in a session of its own (it outlives the run), recording its pid."""
        dirs = [self.state, self.root, posixpath.dirname(self.pidfile), posixpath.dirname(self.log)]
        inner = (f"echo $$ >{shlex.quote(self.pidfile)}; exec {shlex.join(self.args())} "
                 f">>{shlex.quote(self.log)} 2>&1 </dev/null")
        return reads.containerd_changes(
            StringCommand(f"mkdir -p {shlex.join(dirs)} && setsid -f sh -c {shlex.quote(inner)}"))

    def stop(self, pid: int) -> StringCommand:
        """Stop the lab daemon by its own pid (never by name: the host may run a containerd too)."""
        return reads.containerd_changes(StringCommand(f"kill {pid}"))


def _stop(daemon: LabDaemon, pid, timeout_s: int):
    """Stop the lab daemon running as ``pid`` (if any) and wait until it is gone."""
    if pid is None:
        return
    yield daemon.stop(pid)
    yield until(f"the lab containerd (pid {pid}) to stop", daemon.loaded,
                lambda now: (now["pid"] != pid, describe(now)), timeout_s)


def describe(seen: dict) -> str:
    """The loaded view in words, for progress and errors."""
    if seen["pid"] is None:
        return "not running"
    if seen["cri"] != "ok":
        return f"pid {seen['pid']}, CRI down: {seen['error']}"
    return f"pid {seen['pid']}, CRI holds {','.join(seen['runtimes']) or 'no runtime'}"


def _main_config_runtimes(config: str):
    """Handlers the main config alone defines (what the daemon held on the incident day)."""
    found = reads.files((config,)).get(config)
    try:
        return runtime_names(tomllib.loads(found["text"])) if found else None
    except tomllib.TOMLDecodeError:
        return None


def _incident_drift(daemon: LabDaemon, seen: dict, want) -> str:
    """Why the live daemon is not the incident's, in words; empty when it is."""
    if seen["pid"] is None:
        return f"it died (pid {seen['last_pid']} is gone)" if seen["last_pid"] else "never started"
    if seen["args"][1:] != daemon.args()[1:] or seen["exe"] != posixpath.realpath(daemon.binary):
        return f"pid {seen['pid']} runs another binary or config ({' '.join(seen['args'])})"
    if seen["cri"] != "ok":
        return f"its CRI does not answer ({seen['error']}): it was restarted after the drop-in"
    if want is not None and seen["runtimes"] != want:
        return (f"it holds {','.join(seen['runtimes'])}, not the main config's {','.join(want)}: "
                "it was restarted after the drop-in")
    return ""


@operation()
def incident_daemon(daemon: LabDaemon, dropin_glob: str, aside: str, timeout_s: int = 120):
    """
    Ensure the lab's containerd runs as on the incident day: started with the main config alone,
    before any drop-in existed, and never restarted since, so it holds only what the main config
    defines. A daemon that died, runs another binary, or was restarted after the drop-in (it then
    holds something else, or its CRI is down) replays that moment: the drop-ins are set aside, the
    daemon (re)started and awaited through CRI, and the drop-ins put back. Nothing is lost: a
    drop-in left aside by an interrupted run is put back first.

    + daemon: the lab daemon (``LabDaemon``)
    + dropin_glob: the main config's imports glob, whose files are set aside
    + aside: the directory they wait in (outside the glob)
    + timeout_s: how long to wait for the daemon to stop, or for its CRI to answer

    .. code:: python

        incident_daemon(daemon=LabDaemon(...), dropin_glob="/root/gpuop/etc/containerd/conf.d/*.toml",
                        aside="/root/gpuop/.gpuop/conf.d-aside")
    """
    views = reads.containerd()
    if views["restart"] is None:  # the binary is not on this host
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}no containerd at {daemon.binary} on this host: the lab "
                           "runs without a containerd daemon, and what is loaded is the recorded observation")
        return
    conf_d = posixpath.dirname(dropin_glob)
    if reads.files((posixpath.join(aside, "*"),)):
        yield _put_back(aside, conf_d)  # an interrupted run's drop-ins come back first
    seen = views["loaded"]
    why = _incident_drift(daemon, seen, _main_config_runtimes(daemon.config))
    if why:
        if host.state.is_executing and why == "never started":
            logger.info(f"{host.print_prefix}starting the lab containerd ({daemon.binary}) with the "
                        "main config alone, before the drop-in exists")
        elif host.state.is_executing:
            logger.warning(f"{host.print_prefix}the lab containerd is not the incident's: {why}; "
                           "replaying its start with the main config alone (drop-ins set aside, "
                           "then put back)")
        yield reads.containerd_changes(StringCommand(
            f"mkdir -p {shlex.quote(aside)} && for f in {_glob(dropin_glob)}; do "
            f'[ -f "$f" ] && mv "$f" {shlex.quote(aside)}/; done; true'))
        yield from _stop(daemon, seen["pid"], timeout_s)
        yield daemon.start()
        yield until(f"the lab containerd's CRI on {daemon.socket}", daemon.loaded,
                    lambda now: (now["cri"] == "ok", describe(now)), timeout_s)
        yield _put_back(aside, conf_d)


def _glob(pattern: str) -> str:
    """A path for the shell with its final ``*`` left to expand."""
    directory, name = posixpath.split(pattern)
    return shlex.quote(directory) + "/" + name


def _put_back(aside: str, conf_d: str) -> StringCommand:
    """Move set-aside drop-ins back; one whose place was taken meanwhile is kept as a backup."""
    stamp = f"{datetime.now():%Y%m%dT%H%M%S.%f}"
    return reads.containerd_changes(StringCommand(
        f"for f in {shlex.quote(aside)}/*; do [ -f \"$f\" ] || continue; "
        f"t={shlex.quote(conf_d)}/$(basename \"$f\"); "
        f"if [ -e \"$t\" ]; then mv \"$f\" \"$t.gpuop-bak.{stamp}\"; else mv \"$f\" \"$t\"; fi; done"
    ))


@operation()
def stopped(daemon: LabDaemon, timeout_s: int = 120):
    """
    Ensure the lab's containerd is not running (a replay starts it again at its moment).

    .. code:: python

        stopped(daemon=LabDaemon(...))
    """
    yield from _stop(daemon, reads.containerd()["loaded"]["pid"], timeout_s)


@operation()
def surviving_dropin(path: str, daemon: LabDaemon, main_doc: dict):
    """
    Ensure the nvidia drop-in is one this containerd's merge keeps the node whole with: on 1.x it
    carries the main config's CRI section (runc, the default runtime) beside the nvidia runtime,
    as the NVIDIA toolkit 1.18 writes it; on 2.x the toolkit's minimal drop-in. A drop-in it
    replaces is kept as ``<path>.gpuop-bak.<time>``.

    + path: the drop-in
    + daemon: the lab's containerd, whose binary's version decides
    + main_doc: the main config, as written

    .. code:: python

        surviving_dropin(path=".../conf.d/99-nvidia.toml", daemon=LabDaemon(...), main_doc=main)
    """
    restart = reads.containerd()["restart"]
    version = restart["version"] if restart else "unknown"
    yield from text._inner(path=path, content=tomli_w.dumps(repaired_dropin(version, main_doc)))


@operation()
def restarted_into(daemon: LabDaemon, runtimes, timeout_s: int = 120):
    """
    Ensure the lab's containerd holds ``runtimes`` through CRI, restarting it once if it does not,
    and only when the restart forecast (the binary's own ``config dump`` of the files now on disk)
    says its CRI loads them. A forecast that fails stops the host before anything is restarted,
    naming why. After the restart the daemon itself is asked again.

    + daemon: the lab's containerd
    + runtimes: the handlers it must hold, e.g. ("runc", "nvidia")
    + timeout_s: how long to wait for it to stop, and for its CRI to answer

    .. code:: python

        restarted_into(daemon=LabDaemon(...), runtimes=("runc", "nvidia"))
    """
    want = set(runtimes)
    views = reads.containerd()
    seen, restart = views["loaded"], views["restart"]
    if seen["cri"] == "ok" and want <= set(seen["runtimes"]):
        return
    if restart is None:
        yield failure(f"no containerd at {daemon.binary} on this host: nothing to restart; nothing was restarted")
        return
    if not restart["cri_ok"]:
        yield failure(f"the restart forecast fails: {restart['reason']}; a restart would take CRI down, "
                      f"so nothing was restarted ({describe(seen)})")
        return
    if not want <= set(restart["runtimes"]):
        yield failure(f"after a restart containerd {restart['version']} would hold "
                      f"{','.join(restart['runtimes'])}, not {','.join(sorted(want))}; nothing was restarted")
        return
    if host.state.is_executing:
        logger.info(f"{host.print_prefix}restarting the lab containerd once ({describe(seen)}): its "
                    f"forecast loads {','.join(restart['runtimes'])} with CRI ok")
    yield from _stop(daemon, seen["pid"], timeout_s)
    yield daemon.start()
    yield until(f"the restarted lab containerd to hold {','.join(sorted(want))} through CRI", daemon.loaded,
                lambda now: (now["cri"] == "ok" and want <= set(now["runtimes"]), describe(now)), timeout_s)
