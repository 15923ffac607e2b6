"""The lab node's containerd daemon: private to the lab, and held at the incident's moment."""

import posixpath
import shlex
import tomllib
from dataclasses import dataclass
from datetime import datetime

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from pyinfra.facts.server import Which

from facts.containerd import LabContainerd
from facts.files import Files
from gpuop.containerd import runtime_names

from .poll import until


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
        """The loaded view, live: the daemon and what it holds, through CRI."""
        return host.get_fact(LabContainerd, pidfile=self.pidfile, socket=self.socket, crictl=self.crictl)

    def start(self) -> StringCommand:
        """Start the daemon in a session of its own (it outlives the run), recording its pid."""
        dirs = [self.state, self.root, posixpath.dirname(self.pidfile), posixpath.dirname(self.log)]
        inner = (f"echo $$ >{shlex.quote(self.pidfile)}; exec {shlex.join(self.args())} "
                 f">>{shlex.quote(self.log)} 2>&1 </dev/null")
        return StringCommand(f"mkdir -p {shlex.join(dirs)} && setsid -f sh -c {shlex.quote(inner)}")

    def stop(self, pid: int) -> StringCommand:
        """Stop the lab daemon by its own pid (never by name: the host may run a containerd too)."""
        return StringCommand(f"kill {pid}")


def describe(seen: dict) -> str:
    """The loaded view in words, for progress and errors."""
    if seen["pid"] is None:
        return "not running"
    if seen["cri"] != "ok":
        return f"pid {seen['pid']}, CRI down: {seen['error']}"
    return f"pid {seen['pid']}, CRI holds {','.join(seen['runtimes']) or 'no runtime'}"


def _main_config_runtimes(config: str):
    """Handlers the main config alone defines (what the daemon held on the incident day)."""
    found = host.get_fact(Files, paths=(config,)).get(config)
    try:
        return runtime_names(tomllib.loads(found["text"])) if found else None
    except tomllib.TOMLDecodeError:
        return None


def _incident_drift(daemon: LabDaemon, seen: dict, want) -> str:
    """Why the live daemon is not the incident's, in words; empty when it is."""
    if seen["pid"] is None:
        return "it is not running"
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
    if not host.get_fact(Which, command=daemon.binary):
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}no containerd at {daemon.binary} on this host: the lab "
                           "runs without a containerd daemon, and what is loaded is the recorded observation")
        return
    conf_d = posixpath.dirname(dropin_glob)
    left_aside = host.get_fact(Files, paths=(posixpath.join(aside, "*"),))
    seen = daemon.loaded()
    why = _incident_drift(daemon, seen, _main_config_runtimes(daemon.config))
    if why:
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}the lab containerd is not the incident's: {why}; "
                           "replaying its start with the main config alone (drop-ins set aside, "
                           "then put back)")
        yield StringCommand(f"mkdir -p {shlex.quote(aside)} && for f in {_glob(dropin_glob)}; do "
                            f'[ -f "$f" ] && mv "$f" {shlex.quote(aside)}/; done; true')
        if seen["pid"] is not None:
            pid = seen["pid"]
            yield daemon.stop(pid)
            yield until(f"the lab containerd (pid {pid}) to stop", daemon.loaded,
                        lambda now: (now["pid"] != pid, describe(now)), timeout_s)
        yield daemon.start()
        yield until(f"the lab containerd's CRI on {daemon.socket}", daemon.loaded,
                    lambda now: (now["cri"] == "ok", describe(now)), timeout_s)
    if why or left_aside:
        yield _put_back(aside, conf_d)


def _glob(pattern: str) -> str:
    """A path for the shell with its final ``*`` left to expand."""
    directory, name = posixpath.split(pattern)
    return shlex.quote(directory) + "/" + name


def _put_back(aside: str, conf_d: str) -> StringCommand:
    """Move set-aside drop-ins back; one whose place was taken meanwhile is kept as a backup."""
    stamp = f"{datetime.now():%Y%m%dT%H%M%S.%f}"
    return StringCommand(
        f"for f in {shlex.quote(aside)}/*; do [ -f \"$f\" ] || continue; "
        f"t={shlex.quote(conf_d)}/$(basename \"$f\"); "
        f"if [ -e \"$t\" ]; then mv \"$f\" \"$t.gpuop-bak.{stamp}\"; else mv \"$f\" \"$t\"; fi; done"
    )


@operation()
def stopped(daemon: LabDaemon, timeout_s: int = 120):
    """
    Ensure the lab's containerd is not running (a replay starts it again at its moment).

    .. code:: python

        stopped(daemon=LabDaemon(...))
    """
    seen = daemon.loaded()
    if seen["pid"] is None:
        return
    pid = seen["pid"]
    yield daemon.stop(pid)
    yield until(f"the lab containerd (pid {pid}) to stop", daemon.loaded,
                lambda now: (now["pid"] != pid, describe(now)), timeout_s)
