"""Files with exact content, kept safe before they are replaced."""

import base64
import posixpath
import shlex
from datetime import datetime

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from . import reads


@operation()
def text(path: str, content: str, mode: str = "644", backup: bool = True):
    """
    Ensure a file holds exactly ``content`` with ``mode``.

    + path: file on the target
    + content: the whole text it must hold
    + mode: octal permission bits
    + backup: keep a differing file as ``<path>.gpuop-bak.<time>`` beside it before replacing it

    .. code:: python

        text(path="/root/gpuop/etc/containerd/config.toml", content=tomli_w.dumps(config))
    """
    current = reads.files((path,)).get(path)
    if current and current["text"] == content and current["mode"] == mode:
        return
    reads.wrote(path, content, mode)
    if current and current["text"] == content:
        yield f"chmod {mode} {shlex.quote(path)}"
        return
    keep = ""
    if current and backup:
        kept = f"{path}.gpuop-bak.{datetime.now():%Y%m%dT%H%M%S.%f}"
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}{path} differs from what the playbook writes; "
                           f"keeping it as {kept}")
        keep = f"cp -p {shlex.quote(path)} {shlex.quote(kept)} && "
    yield StringCommand(keep + _written(path, content, mode))


def _written(path: str, content: str, mode: str) -> str:
    """One command writing a file whole: its directory, the text (in base64, so any byte survives
    the shell) into a file beside it with its mode, renamed over the path (never half-written).
    pyinfra's ``files.put`` would spend six round trips on it (its own stat facts, a temporary
    directory, the copy, the mode); the run already read the file in its batch."""
    tmp = shlex.quote(f"{path}.gpuop-tmp")
    body = base64.b64encode(content.encode()).decode()
    return (f"mkdir -p {shlex.quote(posixpath.dirname(path))} && printf %s {body} | base64 -d > {tmp} "
            f"&& chmod {mode} {tmp} && mv -f {tmp} {shlex.quote(path)}")
