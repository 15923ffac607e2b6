"""Files with exact content, kept safe before they are replaced."""

import base64
import io
import posixpath
import shlex

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, StringCommand, operation

from gpuop.layout import backup_of

from . import reads

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
            logger.warning(f"{host.print_prefix}{path} differs from what the playbook writes; "
                           f"keeping it as {kept}")
        keep = f"cp -p {shlex.quote(path)} {shlex.quote(kept)} && "
    yield from _written(path, content, mode, keep)


def _written(path: str, content: str, mode: str, before: str = ""):
    """Write a file whole: its directory, the text into a file beside it with its mode, renamed
    over the path (never half-written), in one command after ``before``. The text goes in base64
    (any byte survives the shell) inside the command, or, past ``INLINE_MAX_BYTES``, by an upload
    first. pyinfra's ``files.put`` would spend six round trips on a small file (its own stat
    facts, a temporary directory, the copy, the mode); the run already read the file in its batch."""
    tmp = f"{path}.gpuop-tmp"
    directory = f"mkdir -p {shlex.quote(posixpath.dirname(path))}"
    body = base64.b64encode(content.encode()).decode()
    if len(body) <= INLINE_MAX_BYTES:
        filled = f"printf %s {body} | base64 -d > {shlex.quote(tmp)} && "
    else:
        yield StringCommand(directory)
        yield FileUploadCommand(io.BytesIO(content.encode()), tmp)
        filled = ""
    yield StringCommand(f"{before}{directory} && {filled}chmod {mode} {shlex.quote(tmp)} "
                        f"&& mv -f {shlex.quote(tmp)} {shlex.quote(path)}")
