"""Facts about files on the target."""

import base64
import re
import shlex

from pyinfra.api import FactBase

_GLOB = re.compile(r"([*?])")


def _shell_glob(pattern: str) -> str:
    """Quote a path for the shell but leave ``*`` and ``?`` to expand on the target."""
    return "".join(p if _GLOB.fullmatch(p) else shlex.quote(p) for p in _GLOB.split(pattern) if p)


class Files(FactBase):
    """
    Text and mode of regular files, glob patterns expanded on the target, in one round trip.
    Missing files and patterns that match nothing are simply absent from the result.

    .. code:: python

        host.get_fact(Files, paths=("/root/gpuop/etc/containerd/conf.d/*.toml",))
        {"/root/gpuop/etc/containerd/conf.d/99-nvidia.toml": {"mode": "644", "text": "..."}}
    """

    @staticmethod
    def default():
        return {}

    def command(self, paths):
        targets = " ".join(_shell_glob(p) for p in paths)
        # A header line (mode, path) then the body in base64, so any content survives intact.
        return (
            f'for f in {targets}; do [ -f "$f" ] || continue; '
            'printf "%s %s\\n" "$(stat -c %a "$f")" "$f"; base64 -w0 "$f"; echo; done'
        )

    def process(self, output):
        found = {}
        for header, body in zip(output[::2], output[1::2]):
            mode, path = header.split(" ", 1)
            found[path] = {"mode": mode, "text": base64.b64decode(body).decode()}
        return found
