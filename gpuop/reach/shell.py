"""The shell gpuop sends to a node or a lab host, and what it prints, read back: a containerd
asked through CRI (``cri_info``, ``cri_answer``), a binary's own merge of its files at its next
start (``restart_merge``, ``restart_answer``), files as one line (``TAR_OF_ARGS``, ``untarred``).
The facts (``facts/``) and the node's read (``node_read``) share them; none imports pyinfra.
"""

import base64
import binascii
import io
import json
import re
import shlex
import tarfile
import tomllib

from gpuop.judgment.containerd import (DUMP_WITHOUT_MIGRATIONS, binary_version, cri_cdi, cri_runtimes, logged_words,
                                       restart_forecast, start_subcommand, unreadable_config)

_DUMP_FAILED = "--- dump failed"
CRICTL_DEADLINE_S = 10  # crictl's own --timeout is 3 s; this ends one that still hangs
DUMP_DEADLINE_S = 30  # `containerd config dump` parses files: it has no reason to take longer


_GLOB = re.compile(r"([*?])")


def shell_glob(pattern: str) -> str:
    """Quote a path for the shell but leave ``*`` and ``?`` to expand on the target."""
    return "".join(p if _GLOB.fullmatch(p) else shlex.quote(p) for p in _GLOB.split(pattern) if p)


def cri_info(crictl: str, socket: str) -> str:
    """The shell that asks a containerd through CRI what it holds (``crictl info``), under a deadline,
    and prints crictl's answer then its exit status; ``crictl`` and ``socket`` are shell words
    (quoted, or a variable), read by ``cri_answer``.

        cri_info("crictl", '"$addr"')
    """
    return (f'timeout -k 2 {CRICTL_DEADLINE_S} {crictl} --config /dev/null '
            f'--runtime-endpoint unix://{socket} --timeout 3s info 2>&1; echo "$?"')


def cri_answer(lines: list) -> dict:
    """What ``cri_info`` printed, as the loaded view: ``cri`` ok, down (the runtime did not answer
    within crictl's own 3 s), or unanswered (crictl itself hung: ended at ``CRICTL_DEADLINE_S``, so
    nothing is known of what the runtime holds), the runtimes, the error.

        cri_answer(['{"config": {"containerd": {"runtimes": {"runc": {}}}}}', "0"])
        -> {"cri": "ok", "runtimes": ["runc"], "default_runtime": "", "error": "", "crictl": True,
            "cdi": False, "cdi_spec_dirs": []}
    """
    answer, status = "\n".join(lines[:-1]), lines[-1].strip()
    if status != "0":
        error = (f"crictl did not answer within {CRICTL_DEADLINE_S}s" if status in ("124", "137")
                 else logged_words(answer.strip().splitlines()[-1]) if answer.strip() else f"exit {status}")
        return {"cri": "unanswered" if status in ("124", "137") else "down", "runtimes": [], "default_runtime": "",
                "error": error, "crictl": status != "127", "cdi": False, "cdi_spec_dirs": []}
    info = json.loads(answer)
    runtimes, default = cri_runtimes(info)
    cdi, dirs = cri_cdi(info)
    return {"cri": "ok", "runtimes": runtimes, "default_runtime": default, "error": "", "crictl": True,
            "cdi": cdi, "cdi_spec_dirs": dirs}


def restart_merge(binary: str, config: str) -> str:
    """The shell that asks a containerd binary for its version and its own merge of ``config``
    as its next start reads it; ``binary`` and ``config`` are shell words (quoted, or a variable).
    Prints nothing where the binary is not there; read by ``restart_answer``.

        restart_merge("/usr/bin/containerd", '"$cfg"')
    """
    b, c = binary, config
    # What this version loads at start is its `config dump`, or `config migrate` where the
    # dump skips migrations (gpuop.judgment.containerd.start_subcommand): the release decides.
    migrating = "|".join(DUMP_WITHOUT_MIGRATIONS)
    start = f"timeout -k 2 {DUMP_DEADLINE_S} {b} --config {c} config \"$sub\""
    # One that fails is asked again for its words; one that hung is not asked twice.
    return (f"if [ -x {b} ]; then v=$(timeout -k 2 {DUMP_DEADLINE_S} {b} --version); "
            'echo "$v"; set -- $v; r=${3#v}; r=${r%%[~+-]*}; '
            f'case "$r" in {migrating}) sub=migrate;; *) sub=dump;; esac; '
            f"{start} 2>/dev/null || {{ rc=$?; echo {shlex.quote(_DUMP_FAILED)}; "
            f'if [ "$rc" -ge 124 ]; then echo "config $sub did not answer within {DUMP_DEADLINE_S}s"; '
            f"else {start} 2>&1 | tail -n 3; fi; }}; fi")


def restart_answer(output: list) -> dict:
    """What ``restart_merge`` printed, as the restart forecast: the version and ``Forecast``'s fields.

        restart_answer(["containerd github.com/containerd/containerd/v2 v2.4.2 x", "version = 3", ...])
        -> {"version": "2.4.2", "runtimes": [...], "default_runtime": "runc", "cri_ok": True, ...}
    """
    version, body = binary_version(output[0]), output[1:]
    if _DUMP_FAILED in body:
        said = [line.strip() for line in body[body.index(_DUMP_FAILED) + 1:] if line.strip()]
        error = said[-1] if said else ""  # the binary's own last word; log lines come before it
        forecast = unreadable_config(version, error or f"config {start_subcommand(version)} failed")
    else:
        forecast = restart_forecast(version, tomllib.loads("\n".join(body)))
    return {"version": version, **forecast.__dict__}


# The files named in "$@", as one base64 tar on one line (nothing when there are none).
TAR_OF_ARGS = '[ $# -eq 0 ] || { tar -czhPf - --no-recursion --ignore-failed-read -- "$@" | base64 -w0; echo; }'


def untarred(line: str) -> dict:
    """The files in ``TAR_OF_ARGS``'s line: ``{path: {"mode": "644", "text": ...}}``."""
    found = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(line)), mode="r:gz") as tar:
            for member in tar:
                if member.isfile() or member.islnk():  # tar stores a file seen twice as a link
                    found[member.name] = {"mode": format(member.mode & 0o7777, "o"),
                                          "text": tar.extractfile(member).read().decode()}
    except (tarfile.TarError, binascii.Error, EOFError) as e:
        raise ValueError(f"the target's files came back unreadable ({e}): does it have GNU tar "
                         "and base64?") from None
    return found
