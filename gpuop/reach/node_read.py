"""A real node's one read: the shell it runs (``node_read.sh``, beside this file, and the shell it
shares with the lab's facts, ``gpuop.reach.shell``) and its output read back (``parse``). The fleet
audit's fact (``runbook.reach.node.NodeRuntime``) and the node agent send the same command.
"""

import base64
import os
import shlex

from gpuop.judgment import crio
from gpuop.judgment.driver import driver_facts, known_kmods
from gpuop.judgment.regen import nvidia_binaries
from gpuop.reach.shell import cri_answer, restart_answer, shell_functions, untarred

_SECTION = "--- gpuop "
K3S_SOCKET = "/run/k3s/containerd/containerd.sock"  # RKE2's and k3s's own containerd (docs/fleet-audit.md)
READ_SH = os.path.join(os.path.dirname(__file__), "node_read.sh")  # the read, in shell, run on the node


READ_MARGIN_S = 5  # of a read's deadline, kept for its last section's kill and the way back
FILE_KIB = 1024  # the most of one file the read carries; a larger one is named, not read (a config is a few KiB)


def node_read(crictl: str = "crictl", deadline_s: float = 150, known_modules: dict | None = None) -> str:
    """The node's read as one shell command: ``GPUOP_READ``, the read's values and functions (the
    shell it shares with the lab's facts: a containerd's own merge, its CRI answer, files as one
    line; then node_read.sh's), defined, then ``read_node``, which runs each section in a shell of
    its own from ``GPUOP_READ``, every one inside ``deadline_s`` (the deadline its caller reads
    under) less ``READ_MARGIN_S``. ``known_modules``: the NVIDIA module files an earlier read
    found (``gpuop.judgment.driver.known_modules``): each asked of modinfo again only where its
    size or time changed.

        node_read("/usr/local/bin/crictl", 150)  # -> "GPUOP_READ='CRICTL=/usr/local/bin/crictl\n...'\n...\nread_node"
    """
    with open(READ_SH) as f:
        script = f.read()
    functions = (
        f"CRICTL={shlex.quote(crictl)}\nNVIDIA_BINARIES={shlex.quote(' '.join(nvidia_binaries()))}\n"
        f"READ_S={max(1, int(deadline_s - READ_MARGIN_S))}\nFILE_KIB={FILE_KIB}\n"
        f"KNOWN_KMODS={shlex.quote(known_kmods(known_modules or {}))}\n{shell_functions()}{script}"
    )
    return f'GPUOP_READ={shlex.quote(functions)}\neval "$GPUOP_READ"\nread_node'


def parse(output: list) -> dict:
    """The read's output (``node_read``), section by section, as ``runbook.reach.node.NodeRuntime`` gives it.

        parse(["--- gpuop hostname gpu-a"])["hostname"] -> "gpu-a"

    A section that did not end within its deadline (``--- gpuop unread NAME DEADLINE``) is in
    ``unread`` ({"cdi": "10s", "containerd 812": "10s"}), its part left as never read; so is a file
    whose text was not had (``file PATH``: larger than ``FILE_KIB``, or not UTF-8 text), left out
    of its files.
    """
    result = {"hostname": "", "containerds": [], "crios": [], "kubelet": None, "driver": None, "unread": {}}
    daemons, runtime = {}, None
    for (kind, *rest), lines in _sections(output, result["unread"]):
        unread = result["unread"].get(" ".join([kind, *rest]))
        if unread and kind == "runtime":  # the runtime, its files unread
            runtime = daemons[rest[0]]
            runtime["serves"] = True
        elif unread and kind == "cri":  # crictl, under its own deadline, did not end within the section's
            runtime["loaded"] = {**cri_answer(["124"]), "error": f"crictl did not answer within {unread}"}
        elif unread:  # its part left as never read; a process unread is in no list, named by it alone
            continue
        elif kind == "hostname":
            result["hostname"] = rest[0].strip() if rest else ""
        elif kind == "driver":
            result["driver"] = driver_facts(lines)
        elif kind == "kubelet":
            exe, args, endpoint = (lines + ["", "", ""])[:3]
            result["kubelet"] = {"pid": int(rest[0]), "exe": exe, "args": _args(args), "endpoint": endpoint}
        elif kind in ("containerd", "crio"):
            daemons[rest[0]] = _daemon(kind, int(rest[0]), lines)
            result["containerds" if kind == "containerd" else "crios"].append(daemons[rest[0]])
        elif kind == "runtime":
            runtime = daemons[rest[0]]
            runtime.update(serves=True, files=_files(lines, result["unread"]))
        else:
            _runtime_part(runtime, kind, lines, result["unread"])
    return result


def _files(lines: list, unread: dict) -> dict:
    """The files of a section written by ``bounded_tar`` (their tar's line, then ``large BYTES PATH``
    for each too large to carry, ``odd PATH`` for each that is no regular file); each whose text
    was not had is put in ``unread`` (``file PATH``: why), not among the files."""
    found = untarred(lines[0]) if lines and lines[0].strip() else {}
    for line in lines[1:]:
        if line.startswith("large "):
            size, _, path = line[len("large ") :].partition(" ")
            unread[f"file {path}"] = f"{int(size) / 2**20:.1f} MiB, above the read's bound of {FILE_KIB // 1024} MiB"
        elif line.startswith("odd "):
            unread[f"file {line[len('odd ') :]}"] = (
                "not a regular file: a FIFO, a socket, a link to nothing or to itself"
            )
    for path in [p for p, f in found.items() if "unread" in f]:
        unread[f"file {path}"] = found.pop(path)["unread"]
    return found


def _sections(output: list, unread: dict) -> list:
    """The read's sections in order, ``([kind, rest...], lines)``; each section named unread put in
    ``unread`` (name -> deadline), its lines none."""
    sections, current = [], None
    for line in output:
        if line.startswith(_SECTION + "unread "):
            name, _, deadline = line[len(_SECTION + "unread ") :].strip().rpartition(" ")
            unread[name] = deadline
            current = None
        elif line.startswith(_SECTION):
            current = (line[len(_SECTION) :].split(" ", 1), [])
            sections.append(current)
        elif current is not None:
            current[1].append(line)
    return sections


def _daemon(kind: str, pid: int, lines: list) -> dict:
    """A containerd or CRI-O process as its section describes it, its parts not read yet. Its lines:
    exe, args, config, then CRI-O's drop-in directory and socket, or containerd's socket and binary."""
    exe, args, config, fourth, fifth = (lines + [""] * 5)[:5]
    crio = kind == "crio"
    return {
        "pid": pid,
        "exe": exe,
        "args": _args(args),
        "config": config,
        **({"config_dir": fourth} if crio else {}),
        "address": fifth if crio else fourth,
        "binary": exe if crio else fifth,
        "serves": False,
        "files": {},
        "restart": None,
        "loaded": None,
        "gpu_cdi_specs": [],
        **({"hooks": {}} if crio else {"nvidia_runtimes": []}),
    }


def _runtime_part(runtime: dict, kind: str, lines: list, unread: dict) -> None:
    """One section of the runtime's own (its next start, its start time, CRI, CDI, status, hooks, the
    NVIDIA binaries) read into ``runtime``."""
    if kind == "restart" and "config_dir" in runtime:
        runtime["restart"] = crio.restart_answer(lines) if any(x.strip() for x in lines) else None
    elif kind == "restart":
        runtime["restart"] = restart_answer(lines) if lines else None
    elif kind == "started":
        runtime["started"] = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    elif kind == "cri":
        runtime["loaded"] = cri_answer(lines)
    elif kind == "cdi":
        runtime["gpu_cdi_specs"] = [line for line in lines if line.strip()]
    elif kind == "status":  # CRI-O's own answer, asked where the node has no crictl
        runtime["loaded"] = crio.status_answer(lines) or runtime["loaded"]
    elif kind == "hooks":
        runtime["hooks"] = _files(lines, unread)
    elif kind == "nvidia":
        runtime["nvidia_runtimes"] = [line for line in lines if line.strip()]


def _args(b64: str) -> list:
    return base64.b64decode(b64).decode(errors="replace").split("\0")[:-1]
