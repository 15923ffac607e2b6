"""Files with exact content, kept safe before they are replaced."""

import base64
import io
import posixpath
import shlex

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, StringCommand, operation

from gpuop.layout import backup_of
from runbook.run import reads

# A shell command is one argument to `sh -c`, which the kernel caps at 128 KiB: a file whose
# base64 would not fit well below that is uploaded (one transfer more) instead of inlined.
INLINE_MAX_BYTES = 64 * 1024


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
        kept = backup_of(path)
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}{path} differs from what the playbook writes; keeping it as {kept}")
        keep = f"cp -p {shlex.quote(path)} {shlex.quote(kept)} && "
    yield from _written(path, content, mode, keep)


def inline_write(path: str, content: str, mode: str) -> str:
    """One command writing a small file whole (see ``_written``): its directory, the text in
    base64 (any byte survives the shell) into a file beside it with its mode, renamed over it."""
    tmp = shlex.quote(f"{path}.gpuop-tmp")
    body = base64.b64encode(content.encode()).decode()
    return (
        f"mkdir -p {shlex.quote(posixpath.dirname(path))} && printf %s {body} | base64 -d > {tmp} "
        f"&& chmod {mode} {tmp} && mv -f {tmp} {shlex.quote(path)}"
    )


def _written(path: str, content: str, mode: str, before: str = ""):
    """Write a file whole, never half-written, after ``before``: inline in one command
    (``inline_write``), or, past ``INLINE_MAX_BYTES``, uploaded beside it first and renamed over
    it. pyinfra's ``files.put`` would spend six round trips on a small file (its own stat facts, a
    temporary directory, the copy, the mode); the run already read the file in its batch."""
    if len(content.encode()) * 4 // 3 <= INLINE_MAX_BYTES:
        yield StringCommand(before + inline_write(path, content, mode))
        return
    tmp = f"{path}.gpuop-tmp"
    yield StringCommand(f"mkdir -p {shlex.quote(posixpath.dirname(path))}")
    yield FileUploadCommand(io.BytesIO(content.encode()), tmp)
    yield StringCommand(f"{before}chmod {mode} {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(path)}")
