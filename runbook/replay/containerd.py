"""The lab node's containerd daemon: private to the lab, and held at the incident's moment."""

import posixpath
import shlex
import tomllib
from datetime import UTC, datetime

import tomli_w
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from gpuop.judgment.configs import repaired_dropin
from gpuop.judgment.containerd import runtime_names
from gpuop.layout import STOP_GRACE_S, backup_of
from runbook.reach.batch import Batch
from runbook.reach.containerd import ContainerdRestart
from runbook.reach.files import Files, shell_glob
from runbook.replay.labdaemon import LabDaemon
from runbook.run import reads
from runbook.run.files import inline_write as _inline_write
from runbook.run.files import text
from runbook.run.poll import failure, poll, until


def _pids(seen: dict) -> list:
    return [d["pid"] for d in seen["daemons"]]


def _stop(daemon: LabDaemon, pids, timeout_s: int):
    """Stop the lab daemons ``pids``: TERM (with CONT, so that a stopped one takes it), KILL
    for any still there after ``STOP_GRACE_S``; wait until none of them holds the root."""
    if not pids:
        return
    yield daemon.signal(pids, "TERM", "CONT")

    def gone(state, host):
        what = f"the lab containerd (pid {', '.join(map(str, pids))}) to stop"
        done = lambda now: (not set(pids) & set(_pids(now)), describe(now))  # noqa: E731
        held, words = poll(host, what, daemon.loaded, done, min(STOP_GRACE_S, timeout_s))
        if not held:
            left = [p for p in pids if p in _pids(daemon.loaded())]
            logger.warning(
                f"{host.print_prefix}the lab containerd (pid {', '.join(map(str, left))}) "
                f"did not stop on TERM within {STOP_GRACE_S}s ({words}); killing it"
            )
            host.run_shell_command(
                daemon.signal(left, "KILL"), _sudo=bool(host.data.get("_sudo")), _timeout=host.data.get("_timeout")
            )
            held, words = poll(host, what, daemon.loaded, done, timeout_s)
        reads.moved(host)
        if not held:
            logger.error(f"{host.print_prefix}timed out after {timeout_s}s waiting for {what}; last seen: {words}")
        return held

    yield FunctionCommand(gone, (), {})


def _restart(daemon: LabDaemon, seen: dict, what: str, done, timeout_s: int):
    """Stop every daemon on the lab's root, start one, and wait until ``done(now)`` holds."""
    yield from _stop(daemon, _pids(seen), timeout_s)
    yield daemon.start()
    yield until(what, daemon.loaded, done, timeout_s)


def describe(seen: dict) -> str:
    """The loaded view in words, for progress and errors."""
    daemons = seen["daemons"]
    if not daemons:
        return f"not running (its log ends: {seen['log']})" if seen.get("log") else "not running"
    if len(daemons) > 1:
        return f"{len(daemons)} daemons on its root (pids {', '.join(map(str, _pids(seen)))})"
    pid = f"pid {daemons[0]['pid']}" + (" (stopped)" if daemons[0]["state"] == "T" else "")
    if seen["cri"] != "ok":
        return f"{pid}, CRI down: {seen['error']}"
    return f"{pid}, CRI holds {','.join(seen['runtimes']) or 'no runtime'}"


def _main_config_runtimes(config: str):
    """Handlers the main config alone defines (what the daemon held on the incident day)."""
    found = reads.files((config,)).get(config)
    try:
        return runtime_names(tomllib.loads(found["text"])) if found else None
    except tomllib.TOMLDecodeError:
        return None


def _incident_drift(daemon: LabDaemon, seen: dict, want) -> str:
    """Why the live daemon is not the incident's, in words; empty when it is."""
    daemons = seen["daemons"]
    if not daemons:
        return f"it died (pid {seen['last_pid']} is gone)" if seen["last_pid"] else "never started"
    if len(daemons) > 1:
        return f"{len(daemons)} daemons hold its root {daemon.root} (pids {', '.join(map(str, _pids(seen)))})"
    if seen["args"][1:] != daemon.args()[1:] or seen["exe"] != posixpath.realpath(daemon.binary):
        return f"pid {seen['pid']} runs another binary or config ({' '.join(seen['args'])}, {seen['exe']})"
    if daemon.namespace and daemons[0]["mnt"] != seen["namespace"]:
        return (
            f"pid {seen['pid']} runs outside the kubelet node's namespace {daemon.namespace} "
            f"(in {daemons[0]['mnt']}, the node's is {seen['namespace'] or 'not there'})"
        )
    if seen["cri"] != "ok":
        if daemons[0]["state"] == "T":
            return f"pid {seen['pid']} is stopped, and its CRI does not answer ({seen['error']})"
        return f"its CRI does not answer ({seen['error']}): it hangs, or was restarted after the drop-in"
    if want is not None and seen["runtimes"] != want:
        return (
            f"it holds {','.join(seen['runtimes'])}, not the main config's {','.join(want)}: "
            "it was restarted after the drop-in"
        )
    return ""


def _say_replay(daemon: LabDaemon, why: str) -> None:
    """Why the lab containerd's incident start is replayed: it never started, or what it is now."""
    if why == "never started":
        logger.info(
            f"{host.print_prefix}starting the lab containerd ({daemon.binary}) with the "
            "main config alone, before the drop-in exists"
        )
    else:
        logger.warning(
            f"{host.print_prefix}the lab containerd is not the incident's: {why}; "
            "stopping what holds its root and replaying its start with the main config "
            "alone (drop-ins set aside, then put back)"
        )


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
            logger.warning(
                f"{host.print_prefix}no containerd at {daemon.binary} on this host: the lab "
                "runs without a containerd daemon, and what is loaded is the recorded observation"
            )
        return
    conf_d = posixpath.dirname(dropin_glob)
    if reads.files((posixpath.join(aside, "*"),)):
        yield _put_back(aside, conf_d)  # an interrupted run's drop-ins come back first
    seen = views["loaded"]
    why = _incident_drift(daemon, seen, _main_config_runtimes(daemon.config))
    if not why:
        if seen["last_pid"] != seen["pid"]:
            if host.state.is_executing:
                logger.warning(
                    f"{host.print_prefix}the lab containerd pid {seen['pid']} holds "
                    f"{daemon.root} and is the incident's, but its pid file says "
                    f"{seen['last_pid'] or 'nothing'}: adopting it"
                )
            yield daemon.adopt(seen["pid"])
        return
    if host.state.is_executing:
        _say_replay(daemon, why)
    yield reads.containerd_changes(
        StringCommand(
            f"mkdir -p {shlex.quote(aside)} && for f in {shell_glob(dropin_glob)}; do "
            f'[ -f "$f" ] && mv "$f" {shlex.quote(aside)}/; done; true'
        )
    )
    yield from _restart(
        daemon,
        seen,
        f"the lab containerd's CRI on {daemon.socket}",
        lambda now: (now["cri"] == "ok" and len(now["daemons"]) == 1, describe(now)),
        timeout_s,
    )
    yield _put_back(aside, conf_d)


def _put_back(aside: str, conf_d: str) -> StringCommand:
    """Move set-aside drop-ins back; one whose place was taken meanwhile is kept as a backup."""
    return reads.containerd_changes(
        StringCommand(
            f'for f in {shlex.quote(aside)}/*; do [ -f "$f" ] || continue; '
            f't={shlex.quote(conf_d)}/$(basename "$f"); '
            f'if [ -e "$t" ]; then mv "$f" "{backup_of("$t")}"; else mv "$f" "$t"; fi; done'
        )
    )


@operation(is_idempotent=False)
def rebooted(daemon: LabDaemon, moment: str, timeout_s: int = 120):
    """
    Restart the lab containerd as a node's reboot restarts it: every daemon on its root stopped,
    one started with the files as they are now (the drop-ins included), and waited for until it
    answers, its CRI up or refused (what a restart does is what is seen, not prevented). The
    moment of the restart goes to ``moment`` (UTC, ISO 8601). It restarts on every run it is in.

    + daemon: the lab's containerd
    + moment: where the restart's moment is recorded (the reboot report's stamp)
    + timeout_s: how long to wait for it to stop, and to answer

    .. code:: python

        rebooted(daemon=LabDaemon(...), moment="/root/gpuop/.gpuop/reboot.txt.stamp")
    """
    seen = reads.containerd()["loaded"]
    when = datetime.now(UTC) if host.state.is_executing else None
    yield from text._inner(path=moment, content=f"{when.isoformat() if when else 'planned'}\n", backup=False)
    # A 1.x whose CRI plugin failed to load still serves containerd's own API: CRI is refused.
    yield from _restart(
        daemon,
        seen,
        f"the restarted lab containerd to answer on {daemon.socket}",
        lambda now: (
            len(now["daemons"]) == 1 and (now["cri"] == "ok" or "unknown service" in now["error"]),
            describe(now),
        ),
        timeout_s,
    )


@operation()
def stopped(daemon: LabDaemon, timeout_s: int = 120):
    """
    Ensure the lab's containerd is not running (a replay starts it again at its moment).

    .. code:: python

        stopped(daemon=LabDaemon(...))
    """
    yield from _stop(daemon, _pids(reads.containerd()["loaded"]), timeout_s)


def _loads(restart, runtimes) -> bool:
    """Whether a restart forecast loads ``runtimes`` with CRI ok."""
    return bool(restart) and restart["cri_ok"] and set(runtimes) <= set(restart["runtimes"])


def _ctk_or_ours(host, daemon: LabDaemon, path: str, copy: str, *, runtimes, nvidia_ctk, version, ours, keep) -> bool:
    """After nvidia-ctk's try (its scratch ``copy`` there only where it ran): its drop-in kept where
    the restart forecast loads ``runtimes``, else gpuop's own (``ours``) written to ``path``, the one
    before kept (``keep``) where nvidia-ctk did not already. Whether it ended well."""
    after, scratch_files = host.get_fact(
        Batch,
        parts=(
            (ContainerdRestart, {"binary": daemon.binary, "config": daemon.config}),
            (Files, {"paths": (copy,)}),
        ),
    )  # one round trip
    for part in (after, scratch_files):
        if isinstance(part, Exception):  # a part that failed: its own words
            raise part
    by_ctk = copy in scratch_files
    if by_ctk and _loads(after, runtimes):
        logger.info(
            f"{host.print_prefix}{nvidia_ctk} wrote {path}; the restart forecast loads "
            f"{','.join(after['runtimes'])} with CRI ok"
        )
        return True
    why = (
        f"what {nvidia_ctk} wrote would not load ({after['reason'] or ','.join(after['runtimes'])})"
        if by_ctk
        else f"no {nvidia_ctk} on this host"
    )
    logger.warning(f"{host.print_prefix}{why}: writing gpuop's own drop-in for containerd {version} to {path}")
    status, _ = host.run_shell_command(
        StringCommand(("" if by_ctk else keep) + _inline_write(path, ours, "644")),
        _sudo=bool(host.data.get("_sudo")),
        _timeout=host.data.get("_timeout"),
    )
    return status


@operation()
def surviving_dropin(path: str, daemon: LabDaemon, main_doc: dict, runtimes, nvidia_ctk: str, scratch: str):
    """
    Ensure the nvidia drop-in is one this containerd's merge keeps the node whole with: the files
    on disk, merged as this binary merges them at its next start, load ``runtimes`` with CRI ok.
    Where they do not, the drop-in is written as an operator would, by the NVIDIA toolkit's own
    ``nvidia-ctk runtime configure --drop-in-config`` (given a scratch copy of the main config,
    which it would rewrite), and judged by the restart forecast before anything restarts; where
    the host has no nvidia-ctk, or what it wrote would not load, by gpuop: on 1.x the main
    config's CRI section beside the nvidia runtime (as the toolkit 1.18 writes it), on 2.x the
    toolkit's minimal drop-in. A drop-in it replaces is kept as ``<path>.gpuop-bak.<time>``.

    + path: the drop-in
    + daemon: the lab's containerd, whose binary's version decides
    + main_doc: the main config, as written
    + runtimes: what the node must load, e.g. ("runc", "nvidia")
    + nvidia_ctk: the toolkit CLI on the target (a name on PATH or a path)
    + scratch: a directory of the lab's own for nvidia-ctk's copy of the main config

    .. code:: python

        surviving_dropin(path=".../conf.d/99-nvidia.toml", daemon=LabDaemon(...), main_doc=main,
                         runtimes=("runc", "nvidia"), nvidia_ctk="nvidia-ctk", scratch=".../.gpuop/nvidia-ctk")
    """
    restart = reads.containerd()["restart"]
    if restart is None or _loads(restart, runtimes):
        return
    current = reads.files((path,)).get(path)
    ours = tomli_w.dumps(repaired_dropin(restart["version"], main_doc))
    keep = f"cp -p {shlex.quote(path)} {shlex.quote(backup_of(path))}; " if current else ""
    copy = posixpath.join(scratch, "config.toml")
    ctk = shlex.quote(nvidia_ctk)
    # The scratch copy is there only when nvidia-ctk ran: the judge tells the two cases apart by it.
    yield reads.containerd_changes(
        StringCommand(
            f"rm -rf {shlex.quote(scratch)}; command -v {ctk} >/dev/null 2>&1 || exit 0; "
            f"{keep}mkdir -p {shlex.quote(scratch)} && "
            f"cp {shlex.quote(daemon.config)} {shlex.quote(copy)} && timeout -k 2 60 {ctk} runtime configure "
            f"--runtime=containerd --config={shlex.quote(copy)} --drop-in-config={shlex.quote(path)} "
            "--config-source=file"
        )
    )

    def judged(state, host):
        return _ctk_or_ours(
            host,
            daemon,
            path,
            copy,
            runtimes=runtimes,
            nvidia_ctk=nvidia_ctk,
            version=restart["version"],
            ours=ours,
            keep=keep,
        )

    yield FunctionCommand(judged, (), {})


@operation()
def restarted_into(daemon: LabDaemon, runtimes, moment: str = "", timeout_s: int = 120):
    """
    Ensure the lab's containerd holds ``runtimes`` through CRI, restarting it once if it does not,
    and only when the restart forecast (the binary's own ``config dump`` of the files now on disk)
    says its CRI loads them. A forecast that fails stops the host before anything is restarted,
    naming why. After the restart the daemon itself is asked again.

    + daemon: the lab's containerd
    + runtimes: the handlers it must hold, e.g. ("runc", "nvidia")
    + moment: where the restart's moment is recorded (UTC, ISO 8601), for what reports on it after; empty: nowhere
    + timeout_s: how long to wait for it to stop, and for its CRI to answer

    .. code:: python

        restarted_into(daemon=LabDaemon(...), runtimes=("runc", "nvidia"), moment=".../.gpuop/restart.stamp")
    """
    want = set(runtimes)
    views = reads.containerd()
    seen, restart = views["loaded"], views["restart"]
    if seen["cri"] == "ok" and len(seen["daemons"]) == 1 and want <= set(seen["runtimes"]):
        return
    if restart is None:
        yield failure(f"no containerd at {daemon.binary} on this host: nothing to restart; nothing was restarted")
        return
    if not restart["cri_ok"]:
        yield failure(
            f"the restart forecast fails: {restart['reason']}; a restart would take CRI down, "
            f"so nothing was restarted ({describe(seen)})"
        )
        return
    if not want <= set(restart["runtimes"]):
        yield failure(
            f"after a restart containerd {restart['version']} would hold "
            f"{','.join(restart['runtimes'])}, not {','.join(sorted(want))}; nothing was restarted"
        )
        return
    if host.state.is_executing:
        logger.info(
            f"{host.print_prefix}restarting the lab containerd once ({describe(seen)}): its "
            f"forecast loads {','.join(restart['runtimes'])} with CRI ok"
        )
    if moment:
        when = datetime.now(UTC) if host.state.is_executing else None
        yield from text._inner(path=moment, content=f"{when.isoformat() if when else 'planned'}\n", backup=False)
    yield from _restart(
        daemon,
        seen,
        f"the restarted lab containerd to hold {','.join(sorted(want))} through CRI",
        lambda now: (now["cri"] == "ok" and want <= set(now["runtimes"]), describe(now)),
        timeout_s,
    )
