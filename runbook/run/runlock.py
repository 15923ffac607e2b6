"""One run at a time per lab: a lock on the target, held from the first operation to the last
(or to the host's failure).

Not an operation (taking and dropping a lock is no change to the lab, so a converged rerun stays
at zero changes): it hooks pyinfra's operation callbacks. The lock is a directory made with
``mkdir`` (atomic), named after the kube context so two runs never drive one cluster at once;
its ``owner`` file says which controller process holds it. A second run waits, printing
progress, up to ``wait_timeout_s``, then fails naming the holder. A lock whose holder process
is gone (a run killed on this controller) is taken over. The first try to take it and the
host's first batched read are one round trip (``reads.after``).

    hold_during_run(host, context="kwok-gpuop-lab", timeout_s=180)   # in deploy.py
"""

import os
import re
import shlex
import socket
import time

import gevent
from pyinfra import logger
from pyinfra.api.state import BaseStateCallback

from runbook.run import reads
from runbook.run.poll import poll


def lock_path(context: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", context or "current-context")
    return f"/tmp/gpuop-{name}.lock"


def _owner() -> str:
    return f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}"


def _holder_gone(holder: str) -> bool:
    """Whether the holder was a process of this controller that no longer runs."""
    match = re.match(r"^(\S+) pid (\d+) ", holder)
    if not match or match.group(1) != socket.gethostname():
        return False
    try:
        os.kill(int(match.group(2)), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _each(hosts, fn) -> list:
    """``fn(host)`` for every host at once, as pyinfra runs an operation (gevent), in order."""
    running = [gevent.spawn(fn, host) for host in hosts]
    gevent.joinall(running, raise_error=True)
    return [g.value for g in running]


def _run(host, command):
    status, output = host.run_shell_command(
        command, _sudo=bool(host.data.get("_sudo")), _timeout=host.data.get("_timeout")
    )
    return status, "\n".join(output.stdout_lines).strip()


def _acquire(host, path, timeout_s) -> bool:
    q = shlex.quote(path)
    take = (
        f"mkdir {q} 2>/dev/null && printf '%s\\n' {shlex.quote(_owner())} > {q}/owner && echo taken"
        f" || cat {q}/owner 2>/dev/null"
    )
    ours = f"{socket.gethostname()} pid {os.getpid()} "
    # The first try travels with the host's first read, in one round trip.
    first, tries = [reads.after(host, take)], []

    def try_take():
        said = (first.pop() if first else _run(host, take)[1]) or "an unknown holder"
        if _holder_gone(said):
            logger.warning(f"{host.print_prefix}taking over {path} from a run that is gone ({said})")
            _run(host, f"rm -rf {q}")
            said = _run(host, take)[1] or "an unknown holder"
        tries.append(said)
        return said

    # A lock held by this very run ends the wait at once: waiting on ourselves would never end.
    held, said = poll(
        host,
        f"the lab lock {path}",
        try_take,
        lambda said: (said == "taken" or said.startswith(ours), said if said == "taken" else f"held by {said}"),
        timeout_s,
    )
    # The first read stands if the first try ended with the lock ours (taken, or taken over from
    # a run that is gone, which kept every other run out until then); else another run may have
    # been changing the lab while it was read.
    if tries[0] != "taken":
        reads.forget(host)
    if said == "taken":
        return True
    if held:
        logger.error(
            f"{host.print_prefix}another host of this run already drives this lab "
            f"({path}); give each host its own kube_context"
        )
    else:
        logger.error(
            f"{host.print_prefix}another gpuop run holds {path} ({said.removeprefix('held by ')}); "
            f"gave up after {timeout_s}s. If no run is active, remove {path} on the host."
        )
    return False


class _RunLock(BaseStateCallback):
    def __init__(self):
        self.wanted = {}  # host name -> (lock path, timeout)
        self.held = set()  # hosts whose lock this run took
        self.ends = None  # the run's first and last operation, once operations run

    def _end(self, state, which: int):
        if self.ends is None:  # the order is fixed once execution starts: compute it once
            order = state.get_op_order()
            self.ends = (order[0], order[-1])
        return self.ends[which]

    def operation_start(self, state, op_hash):
        if op_hash != self._end(state, 0):
            return
        hosts = [h for h in state.inventory.get_active_hosts() if h.name in self.wanted]
        # Every host's lock at once: one round trip of waiting however many hosts there are.
        taken = _each(hosts, lambda host: _acquire(host, *self.wanted[host.name]))
        self.held.update(h for h, ok in zip(hosts, taken) if ok)
        state.fail_hosts({h for h, ok in zip(hosts, taken) if not ok})

    def operation_end(self, state, op_hash):
        if op_hash != self._end(state, 1):
            return
        _each(list(self.held), self._drop)
        self.held.clear()

    def operation_host_error(self, state, host, op_hash, retry_count=0, max_retries=0):
        """A host whose operation failed for good runs nothing more: its lock goes now (the last
        operation's end never comes when no host is left, and the next run had to take it over)."""
        args = state.get_op_meta(op_hash).global_arguments
        if host in self.held and not (args.get("_ignore_errors") or args.get("_continue_on_error")):
            self.held.discard(host)
            self._drop(host)

    def _drop(self, host):
        _run(host, f"rm -rf {shlex.quote(self.wanted[host.name][0])}")


def hold_during_run(host, context: str, timeout_s: int):
    """Take the host's lab lock before its first operation runs, drop it after the last."""
    state = host.state
    handler = next((h for h in state.callback_handlers if isinstance(h, _RunLock)), None)
    if handler is None:
        handler = _RunLock()
        state.add_callback_handler(handler)
    handler.wanted[host.name] = (lock_path(context), timeout_s)
