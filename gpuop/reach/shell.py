"""The shell gpuop sends to a node or a lab host, in a file of its own (``shell.sh``:
``gpuop_cri``, ``gpuop_restart``, ``gpuop_tar``), and what it prints, read back: a containerd
asked through CRI (``cri_answer``), a binary's own merge of its files at its next start
(``restart_answer``), files as one line (``untarred``). The lab's facts (``runbook/reach``) and the node's
read (``node_read``) send ``shell_functions()`` before their own commands.
"""

import base64
import binascii
import io
import json
import os
import re
import shlex
import tarfile
import tomllib

from gpuop.judgment.containerd import (
    DUMP_WITHOUT_MIGRATIONS,
    binary_version,
    cri_cdi,
    cri_runtimes,
    logged_words,
    restart_forecast,
    start_subcommand,
    unreadable_config,
)

_DUMP_FAILED = "--- dump failed"
CRICTL_DEADLINE_S = 10  # crictl's own --timeout is 3 s; this ends one that still hangs
DUMP_DEADLINE_S = 30  # `containerd config dump` parses files: it has no reason to take longer
SHELL_SH = os.path.join(os.path.dirname(__file__), "shell.sh")


def shell_functions() -> str:
    """``shell.sh``'s functions, after the values they read: the text to send before a command
    that calls them.

        shell_functions() + "gpuop_cri crictl /run/containerd/containerd.sock"
    """
    with open(SHELL_SH) as f:
        functions = f.read()
    return (
        f"GPUOP_CRICTL_S={CRICTL_DEADLINE_S} GPUOP_DUMP_S={DUMP_DEADLINE_S} "
        f"GPUOP_DUMP_MIGRATING={shlex.quote(' '.join(DUMP_WITHOUT_MIGRATIONS))}\n{functions}"
    )


_GLOB = re.compile(r"([*?])")


def shell_glob(pattern: str) -> str:
    """Quote a path for the shell but leave ``*`` and ``?`` to expand on the target."""
    return "".join(p if _GLOB.fullmatch(p) else shlex.quote(p) for p in _GLOB.split(pattern) if p)


def cri_answer(lines: list) -> dict:
    """What ``gpuop_cri`` printed, as the loaded view: ``cri`` ok, down (the runtime did not answer
    within crictl's own 3 s), or unanswered (crictl itself hung: ended at ``CRICTL_DEADLINE_S``, so
    nothing is known of what the runtime holds), the runtimes, the error.

        cri_answer(['{"config": {"containerd": {"runtimes": {"runc": {}}}}}', "0"])
        -> {"cri": "ok", "runtimes": ["runc"], "default_runtime": "", "error": "", "crictl": True,
            "cdi": False, "cdi_spec_dirs": []}
    """
    answer, status = "\n".join(lines[:-1]), lines[-1].strip()
    if status != "0":
        error = (
            f"crictl did not answer within {CRICTL_DEADLINE_S}s"
            if status in ("124", "137")
            else logged_words(answer.strip().splitlines()[-1])
            if answer.strip()
            else f"exit {status}"
        )
        return {
            "cri": "unanswered" if status in ("124", "137") else "down",
            "runtimes": [],
            "default_runtime": "",
            "error": error,
            "crictl": status != "127",
            "cdi": False,
            "cdi_spec_dirs": [],
        }
    info = json.loads(answer)
    runtimes, default = cri_runtimes(info)
    cdi, dirs = cri_cdi(info)
    return {
        "cri": "ok",
        "runtimes": runtimes,
        "default_runtime": default,
        "error": "",
        "crictl": True,
        "cdi": cdi,
        "cdi_spec_dirs": dirs,
    }


def restart_answer(output: list) -> dict:
    """What ``gpuop_restart`` printed, as the restart forecast: the version and ``Forecast``'s fields.

    restart_answer(["containerd github.com/containerd/containerd/v2 v2.4.2 x", "version = 3", ...])
    -> {"version": "2.4.2", "runtimes": [...], "default_runtime": "runc", "cri_ok": True, ...}
    """
    version, body = binary_version(output[0]), output[1:]
    if _DUMP_FAILED in body:
        said = [line.strip() for line in body[body.index(_DUMP_FAILED) + 1 :] if line.strip()]
        error = said[-1] if said else ""  # the binary's own last word; log lines come before it
        forecast = unreadable_config(version, error or f"config {start_subcommand(version)} failed")
    else:
        forecast = restart_forecast(version, tomllib.loads("\n".join(body)))
    return {"version": version, **forecast.__dict__}


def untarred(line: str) -> dict:
    """The files in ``gpuop_tar``'s line: ``{path: {"mode": "644", "text": ...}}``. A file that is
    not UTF-8 text (which TOML, YAML and JSON all are) is said so in ``unread``, its text decoded
    as far as it goes, never an error: what a node holds must not end its reader.

        untarred(line)["/etc/containerd/conf.d/50-x.toml"] -> {"mode": "644", "text": "\ufffd...",
            "unread": "not UTF-8 text"}
    """
    found = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(line)), mode="r:gz") as tar:
            for member in tar:
                if member.isfile() or member.islnk():  # tar stores a file seen twice as a link
                    data = tar.extractfile(member).read()
                    found[member.name] = {"mode": format(member.mode & 0o7777, "o"), **_text(data)}
    except (tarfile.TarError, binascii.Error, EOFError) as e:
        raise ValueError(f"the target's files came back unreadable ({e}): does it have GNU tar and base64?") from None
    return found


def _text(data: bytes) -> dict:
    try:
        return {"text": data.decode()}
    except UnicodeDecodeError:
        return {"text": data.decode(errors="replace"), "unread": "not UTF-8 text"}
