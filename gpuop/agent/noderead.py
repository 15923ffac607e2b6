"""The node's one read for the agent: the fleet audit's own script (``gpuop.reach.node_read``), run
through ``enter`` (the command that enters the host's namespaces) in a session of its own under
one deadline and one bound on what it prints. Past either, every process of that session is
ended, on the host too (the sections' ``timeout``s put their shells in groups of their own, so a
process group is not enough: the session is what they all keep), and the read is said not read;
so is a read whose output cannot be parsed: nothing a node holds ends the agent. What the read
cost the node in CPU is counted (the read's processes, as the kernel accounts reaped children).

    read = NodeRead(["nsenter", "-t", "1", "-m", "-u", "-i", "-p", "--"], "crictl", 150)
    answer = read()   # Answer(read={...}, unread="", cpu_s=0.21)
"""

import os
import resource
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

from gpuop.judgment.driver import known_modules
from gpuop.reach.node_read import node_read, parse

KILL_GRACE_S = 5  # after its session is ended, for the read's output to close
OUTPUT_MAX = 16 * 2**20  # what the read may print: a node's read is KiBs, each file in it at most node_read.FILE_KIB
ERRORS_KEPT = 4096  # of what it says on stderr, the last bytes (its words where it fails)


@dataclass(frozen=True)
class Answer:
    read: dict | None  # the parsed read; None where it was not had
    unread: str  # why it was not had, in words
    cpu_s: float  # the CPU its processes took, user and system


def session_of(pid: int) -> int | None:
    """The session ``pid`` is in (``/proc/PID/stat``'s sixth field); None where it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[3])


def end_session(sid: int) -> int:
    """Every process of session ``sid`` killed; how many were."""
    ended = 0
    for name in os.listdir("/proc"):
        if name.isdigit() and session_of(int(name)) == sid:
            try:
                os.kill(int(name), signal.SIGKILL)
                ended += 1
            except OSError:
                pass
    return ended


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _bounded(proc: subprocess.Popen, deadline_s: float) -> tuple:
    """What ``proc`` printed, ``(stdout, stderr's tail, why it was cut)``: read until both pipes
    close, at most ``OUTPUT_MAX`` bytes of stdout and within ``deadline_s``; ``why`` is "" where it
    was not cut."""
    out, err, why = bytearray(), bytearray(), ""
    end = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as pipes:
        pipes.register(proc.stdout, selectors.EVENT_READ)
        pipes.register(proc.stderr, selectors.EVENT_READ)
        while pipes.get_map() and not why:
            left = end - time.monotonic()
            ready = pipes.select(left) if left > 0 else []
            if not ready:
                why = f"the node's read did not end within {deadline_s:.0f}s"
            for key, _ in ready:
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    pipes.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > OUTPUT_MAX:
                        why = f"the node's read printed more than {OUTPUT_MAX // 2**20} MiB"
                else:
                    err = (err + chunk)[-ERRORS_KEPT:]
    return out.decode(errors="replace"), err.decode(errors="replace"), why


def _ended(proc: subprocess.Popen):
    """Every process of ``proc``'s session ended, and ``proc`` waited for where it can be."""
    end_session(proc.pid)
    proc.stdout.close()
    proc.stderr.close()
    proc.kill()
    try:
        proc.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # unkillable (a hung mount): left, the agent goes on
        pass


class NodeRead:
    """The node's read, asked each time it is called."""

    def __init__(self, enter: list, crictl: str, deadline_s: float):
        self.enter, self.crictl, self.deadline_s = list(enter), crictl, deadline_s
        self.known_modules = {}  # the NVIDIA module files the last read found: not decompressed again

    def __call__(self) -> Answer:
        answer = self._read()
        if answer.read is not None:
            self.known_modules = known_modules(answer.read.get("driver"))
        return answer

    def _read(self) -> Answer:
        # a package file missing is said as itself
        command = node_read(self.crictl, self.deadline_s, self.known_modules)
        before = _children_cpu_s()
        try:
            proc = subprocess.Popen(
                [*self.enter, "sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            return Answer(None, f"the node's read could not start: {e.strerror} ({' '.join(self.enter) or 'sh'})", 0.0)
        out, err, cut = _bounded(proc, self.deadline_s)
        if cut:
            _ended(proc)
            return Answer(None, cut, _children_cpu_s() - before)
        try:
            proc.wait(KILL_GRACE_S)  # its output closed: it is ending
        except subprocess.TimeoutExpired:
            _ended(proc)
        cpu = _children_cpu_s() - before
        if proc.returncode != 0:
            return Answer(None, f"the node's read failed ({proc.returncode}): {(err or out).strip()[-300:]}", cpu)
        try:
            return Answer(parse(out.splitlines()), "", cpu)
        except Exception as e:  # noqa: BLE001 (whatever a node holds, its read is said not read, never the agent's end)
            return Answer(None, f"the node's read could not be parsed: {type(e).__name__}: {e}"[:500], cpu)
