"""The node's one read for the agent: the fleet audit's own script (``gpuop.reach.node_read``), run
through ``enter`` (the command that enters the host's namespaces) in a session of its own under
one deadline. At the deadline every process of that session is ended, on the host too (the
sections' ``timeout``s put their shells in groups of their own, so a process group is not
enough: the session is what they all keep), and the read is said not read. What the read cost
the node in CPU is counted (the read's processes, as the kernel accounts reaped children).

    read = NodeRead(["nsenter", "-t", "1", "-m", "-u", "-i", "-p", "--"], "crictl", 150)
    answer = read()   # Answer(read={...}, unread="", cpu_s=0.21)
"""

import os
import resource
import signal
import subprocess
from dataclasses import dataclass

from gpuop.reach.node_read import node_read, parse

KILL_GRACE_S = 5  # after its session is ended, for the read's output to close


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


class NodeRead:
    """The node's read, asked each time it is called."""

    def __init__(self, enter: list, crictl: str, deadline_s: float):
        self.enter, self.crictl, self.deadline_s = list(enter), crictl, deadline_s

    def __call__(self) -> Answer:
        command = node_read(self.crictl, self.deadline_s)  # a package file missing is said as itself
        before = _children_cpu_s()
        try:
            proc = subprocess.Popen(
                [*self.enter, "sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as e:
            return Answer(None, f"the node's read could not start: {e.strerror} ({' '.join(self.enter) or 'sh'})", 0.0)
        try:
            out, err = proc.communicate(timeout=self.deadline_s)
        except subprocess.TimeoutExpired:
            end_session(proc.pid)
            try:
                proc.communicate(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:  # a process out of its session holds the output: let it
                proc.stdout.close()
                proc.stderr.close()
                proc.kill()
                try:
                    proc.wait(KILL_GRACE_S)
                except subprocess.TimeoutExpired:  # unkillable (a hung mount): left, the agent goes on
                    pass
            return Answer(
                None, f"the node's read did not end within {self.deadline_s:.0f}s", _children_cpu_s() - before
            )
        cpu = _children_cpu_s() - before
        if proc.returncode != 0:
            return Answer(None, f"the node's read failed ({proc.returncode}): {(err or out).strip()[-300:]}", cpu)
        return Answer(parse(out.splitlines()), "", cpu)
