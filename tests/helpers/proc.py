"""Processes the tests start, each with a deadline: a hung one fails its test, naming what it ran
and its last output, and is killed with everything it started (its own session), so that the
rest of the suite goes on. Daemons a run starts with setsid are in sessions of their own and
outlive it, as they do for a user."""

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

TAIL_LINES = 40  # how much of a hung process's output its failure shows


def _killed(proc: subprocess.Popen):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(text) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-TAIL_LINES:])


def hung(args, timeout_s, out="", err="") -> AssertionError:
    """The failure of a process that did not finish in time: what it ran and what it said last."""
    return AssertionError(
        f"did not finish within {timeout_s}s: {' '.join(map(str, args))}\n"
        f"--- its last output:\n{_tail(out)}\n--- its last errors:\n{_tail(err)}"
    )


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


def run(args, timeout_s: float, stdin: str | None = None, env=None, cwd=None, check=False) -> Finished:
    """Run ``args`` to the end, its output captured as text, within ``timeout_s``; with ``check``,
    a non-zero exit fails too, naming the command and its errors.

        run(["kubectl", "get", "nodes"], timeout_s=60).stdout
    """
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _killed(proc)
        out, err = proc.communicate()
        raise hung(args, timeout_s, out, err) from None
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {' '.join(map(str, args))}\n{_tail(err)}")
    return Finished(proc.returncode, out, err)


class Started:
    """A process left running (a pyinfra run to interrupt, or to watch), its stderr read line by
    line in the background so that a test can wait for a line with a deadline.

        run = Started([PYINFRA, "inventory.py", "deploy.py", "-y"])
        run.until("Step 2:", timeout_s=120); run.proc.send_signal(signal.SIGINT); run.finish(60)
    """

    def __init__(self, args, env=None):
        self.args = args
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        self.lines: list = []
        self.times: list = []  # when each line was read (time.monotonic())
        self._new = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self):
        return self.proc.returncode

    def _read(self):
        for line in self.proc.stderr:
            self.times.append(time.monotonic())
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def log(self) -> str:
        return "".join(self.lines)

    def first_seen(self, marker: str):
        """When the first line holding ``marker`` was read, None if none was."""
        return next((t for t, line in zip(self.times, self.lines) if marker in line), None)

    def last_seen(self, *markers: str):
        """When the last line holding any of ``markers`` was read, None if none was."""
        return next(
            (t for t, line in zip(reversed(self.times), reversed(self.lines)) if any(m in line for m in markers)), None
        )

    def until(self, marker: str, timeout_s: float) -> str:
        """Wait for a line holding ``marker``; the log so far. Fails (killing the process) if the
        process ends first or the deadline passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._new.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                _killed(self.proc)
                raise AssertionError(
                    f"no line with {marker!r} within {timeout_s}s from "
                    f"{' '.join(map(str, self.args))}\n--- its last errors:\n"
                    f"{_tail(self.log())}"
                ) from None
            if line is None:
                raise AssertionError(f"the run ended before {marker!r}:\n{_tail(self.log())}")
            if marker in line:
                return self.log()

    def finish(self, timeout_s: float) -> str:
        """Wait for the process to end; its whole log. Fails (killing it) past the deadline."""
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _killed(self.proc)
            self.proc.wait()
            self._reader.join(5)
            raise hung(self.args, timeout_s, err=self.log()) from None
        self._reader.join(timeout_s)
        return self.log()
