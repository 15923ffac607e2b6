"""Files with exact content, kept safe before they are replaced."""

import io
import shlex
from datetime import datetime

from pyinfra import host, logger
from pyinfra.api import operation
from pyinfra.operations import files

from facts.files import Files


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
    current = host.get_fact(Files, paths=(path,)).get(path)
    if current and current["text"] == content and current["mode"] == mode:
        return
    if current and current["text"] != content and backup:
        kept = f"{path}.gpuop-bak.{datetime.now():%Y%m%dT%H%M%S.%f}"
        if host.state.is_executing:
            logger.warning(f"{host.print_prefix}{path} differs from what the playbook writes; "
                           f"keeping it as {kept}")
        yield f"cp -p {shlex.quote(path)} {shlex.quote(kept)}"
    yield from files.put._inner(src=io.StringIO(content), dest=path, mode=mode)
