"""Report files computed from live facts at the moment they are captured."""

import posixpath
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import operation

from gpuop.judgment.containerd import Forecast, analyze_merge, import_globs, merge_lines, parsed_toml, restart_lines
from gpuop.judgment.view import lab_view
from gpuop.outputs.reports import render, stamp_holds, stamp_text
from runbook.replay.labdaemon import LabDaemon
from runbook.run import reads
from runbook.run.files import text
from runbook.run.poll import failure
from runbook.run.summary import seen


class Unobservable(Exception):
    """What a report reads is not there (yet): fine while planning, this host's error when executing."""


def _captured(capture):
    """A report's text from ``capture()``; None when it cannot be read: fine while planning
    (earlier steps have not run yet), an error of this host while executing."""
    try:
        return render(capture()), None
    except Unobservable as e:
        return None, str(e)


def _unreadable(path: str, why: str):
    if host.state.is_executing:
        return failure(f"{path} cannot be captured: {why}")
    return f"# {path}: read from the live lab once the steps before it have run"


def recorded(report_path: str, stamp_path: str):
    """A moment report on the target and its stamp, ``(report, stamp)`` texts or None, in one read."""
    found = reads.files((report_path, stamp_path))
    return found.get(report_path, {}).get("text"), found.get(stamp_path, {}).get("text")


def moment_holds(report_path: str, stamp_path: str, inputs: dict) -> bool:
    """Whether a moment report on the target is still exactly what was captured for ``inputs``."""
    report, stamp = recorded(report_path, stamp_path)
    return stamp_holds(stamp, report, inputs)


@operation()
def live(path: str, capture):
    """
    Ensure a report holds what ``capture()`` reads from the live lab now (rewritten on a difference).

    + path: the report file
    + capture: callable returning the report's lines from live facts

    .. code:: python

        live(path="/root/gpuop/out/slots.txt", capture=lambda: slot_lines(...))
    """
    yield from _written_now(path, capture)


def _written_now(path: str, capture):
    """``capture()``'s lines written to ``path`` (or the host failed, saying why they could not be
    read); returns what was written, None where nothing was."""
    content, why = _captured(capture)
    if content is None:
        yield _unreadable(path, why)
        return None
    seen(host, path, content)
    yield from text._inner(path=path, content=content, backup=False)
    return content


@operation()
def moment(path: str, stamp: str, capture, inputs: dict):
    """
    Capture a moment of the incident into a report, once: a report whose stamp still holds for
    ``inputs`` is left alone (its moment has passed); otherwise ``capture()`` reads it live now and
    the stamp beside it records what was written.

    + path: the report file
    + stamp: where its stamp is kept
    + capture: callable returning the report's lines from live facts, at the moment itself
    + inputs: the knobs the moment depends on

    .. code:: python

        moment(path=".../out/unscheduled.txt", stamp=".../.gpuop/unscheduled.txt.stamp",
               capture=lambda: unscheduled_lines(pod), inputs={"nodes": lab_nodes})
    """
    report_text, stamp_recorded = recorded(path, stamp)
    if stamp_holds(stamp_recorded, report_text, inputs):
        seen(host, path, report_text)
        return
    content = yield from _written_now(path, capture)
    if content is not None:
        yield from text._inner(path=stamp, content=stamp_text(content, inputs), backup=False)


def _toml(path: str, content: str) -> dict:
    doc, error = parsed_toml(path, content)
    if doc is None:
        raise Unobservable(error)
    return doc


@dataclass(frozen=True)
class ContainerdViews:
    """The three views of a lab node's runtimes, read on the target now (see ``containerd_views``)."""

    main_doc: dict
    dropin_docs: list
    loaded: list
    loaded_from: str  # "cri": the daemon answered; "cri-down": it did not; "recorded": no lab containerd
    version: str  # the lab containerd's release, "none" without one
    forecast: Forecast | None  # what a restart loads; None without a lab containerd
    view: dict  # all of it as the one view of a node's runtime (gpuop.judgment.view), which the audit judges


def containerd_views(config: str, observed, daemon: LabDaemon | None) -> ContainerdViews:
    """
    What containerd was given and what it holds, read on the target now:
    - written: the main config and the drop-ins its imports reach (expanded on the target),
      parsed with tomllib;
    - loaded: the lab daemon's own answer through CRI; where the host has no lab containerd
      (``daemon`` None, or its binary absent), the ``observed`` handlers, "recorded";
    - after a restart: the binary's own ``config dump`` of the same files, judged by the CRI
      plugin's rule;
    and all of it as the one view of a node's runtime (``gpuop.judgment.view.lab_view``), with the files of
    conf.d that no import reaches.

    .. code:: python

        containerd_views("/root/gpuop/etc/containerd/config.toml", ("runc",), LabDaemon(...))
    """
    main = reads.files((config,)).get(config)
    if main is None:
        raise Unobservable(f"{config} is missing")
    main_doc = _toml(config, main["text"])
    globs = import_globs(main_doc, config)
    dropins = reads.files(globs)
    dropin_docs = [_toml(p, f["text"]) for p, f in sorted(dropins.items())]
    beside = reads.files((posixpath.join(posixpath.dirname(config), "conf.d", "*"),))
    files = {config: main, **beside, **dropins}
    views = reads.containerd() if daemon else {"restart": None}
    restart = views["restart"]
    if restart is None:
        return ContainerdViews(
            main_doc,
            dropin_docs,
            list(observed),
            "recorded",
            "none",
            None,
            lab_view(config, files, None, None, observed),
        )
    loaded = views["loaded"]
    forecast = Forecast(**{k: restart[k] for k in ("runtimes", "default_runtime", "cri_ok", "reason", "starts")})
    running = {
        "pid": loaded.get("pid"),
        "exe": loaded.get("exe") or daemon.binary,
        "config": daemon.config,
        "address": daemon.socket,
        "binary": daemon.binary,
    }
    return ContainerdViews(
        main_doc,
        dropin_docs,
        loaded["runtimes"],
        "cri" if loaded["cri"] == "ok" else "cri-down",
        restart["version"],
        forecast,
        lab_view(config, files, loaded, restart, observed, running),
    )


@operation()
def containerd(merge: str, restart: str, config: str, observed, daemon: LabDaemon | None):
    """
    Ensure merge.txt and restart.txt hold what the three views say now, read once for both (see
    ``containerd_views``): what the files define and the daemon holds, and what a restart loads.
    Each is rewritten only when it differs.

    + merge: merge.txt's path
    + restart: restart.txt's path
    + config: the lab's main config (config.toml)
    + observed: the recorded handlers, for a host without a lab containerd
    + daemon: the lab's containerd (``LabDaemon``), or None

    .. code:: python

        containerd(merge=".../out/merge.txt", restart=".../out/restart.txt",
                   config=".../etc/containerd/config.toml", observed=("runc",), daemon=daemon)
    """
    try:
        views = containerd_views(config, observed, daemon)
    except Unobservable as e:
        yield _unreadable(merge, str(e))
        return
    merged = merge_lines(analyze_merge(views.main_doc, views.dropin_docs), views.loaded)
    forecast = restart_lines(views.version, views.loaded, views.loaded_from, views.forecast)
    for path, lines in ((merge, merged), (restart, forecast)):
        seen(host, path, render(lines))
        yield from text._inner(path=path, content=render(lines), backup=False)
