"""The node agent's image in the lab, built with no pull (what deploy/agent/Containerfile builds
for users, as the lab builds all it runs): Debian's Python 3.11 (its interpreter, its standard
library and every library they link), util-linux's nsenter, and the project's wheel with its
pinned dependencies installed beside them (``pip install --target``); one OCI archive for
``ctr images import``, the same bytes for the same inputs.

    python3 lab/agentimage.py OUT.tar NAME SITE...

NAME: the image's reference (docker.io/library/gpuop-agent:0.1.0, the DaemonSet's); each SITE a
folder of installed packages (lab/build.sh agent-site: the dependencies; the project's wheel,
installed), all in /usr/lib/gpuop-agent, on PYTHONPATH.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin"))

from images import _oci  # the lab's one OCI archive writer

PYTHON = "/usr/bin/python3.11"
STDLIB = "/usr/lib/python3.11"
NSENTER = "/usr/bin/nsenter"
SITE_IN_IMAGE = "usr/lib/gpuop-agent"
# What the agent never imports, and what differs between two installs of the same packages
SKIPPED = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__pycache__", "direct_url.json")


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def tree(root: str, into: str) -> dict:
    """The files under ``root`` (links as links), named under ``into``, but ``SKIPPED``."""
    found = {}
    for where, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        for name in names:
            if name in SKIPPED:
                continue
            path = os.path.join(where, name)
            rel = os.path.join(into, os.path.relpath(path, root))
            found[rel] = os.readlink(path) if os.path.islink(path) else (_read(path), os.stat(path).st_mode & 0o755)
    return found


def linked(binaries: list) -> set:
    """Every library the binaries link (``ldd``), their loader included."""
    libs = set()
    for b in binaries:
        out = subprocess.run(["ldd", b], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            words = line.split()
            if "=>" in words and len(words) > 2 and words[2].startswith("/"):
                libs.add(words[2])
            elif words and words[0].startswith("/") and "ld-linux" in words[0]:
                libs.add(words[0])
    return libs


def image_files(sites: list) -> dict:
    """The image's one layer: Python, nsenter, their libraries, and the ``sites``."""
    files = {
        "usr/bin/python3.11": (_read(PYTHON), 0o755),
        "usr/bin/python3": "python3.11",
        "usr/bin/nsenter": (_read(NSENTER), 0o755),
        **tree(STDLIB, "usr/lib/python3.11"),
    }
    for site in sites:
        files.update(tree(site, SITE_IN_IMAGE))
    shared = [
        os.path.join(where, n)
        for root in (STDLIB, *sites)
        for where, _, names in os.walk(root)
        for n in names
        if ".so" in n and not os.path.islink(os.path.join(where, n))
    ]
    for lib in sorted(linked([PYTHON, NSENTER, *shared])):
        if not lib.startswith(tuple(sites)):  # a wheel's own libraries are in its site already
            files[lib.lstrip("/")] = (_read(os.path.realpath(lib)), 0o755)
    if "lib64/ld-linux-x86-64.so.2" not in files:
        files["lib64/ld-linux-x86-64.so.2"] = "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    return files


def agent_archive(name: str, sites: list) -> bytes:
    """The OCI archive of image ``name``: the agent (``python3 -m gpuop.agent``) as its entry point.

    agent_archive("docker.io/library/gpuop-agent:0.1.0", ["/cache/agent-site", "/tmp/wheel"])
    """
    run = {
        "Env": ["PATH=/usr/bin:/bin", f"PYTHONPATH=/{SITE_IN_IMAGE}", "PYTHONDONTWRITEBYTECODE=1"],
        "Entrypoint": ["/usr/bin/python3.11", "-m", "gpuop.agent"],
    }
    return _oci((image_files(sites), {name: run}))


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[6].strip())
    data = agent_archive(sys.argv[2], sys.argv[3:])
    with open(sys.argv[1] + ".new", "wb") as f:
        f.write(data)
    os.replace(sys.argv[1] + ".new", sys.argv[1])
