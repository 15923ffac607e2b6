"""Waiting on a live condition: poll a fact, report progress, fail with the last state seen."""

import time

import gevent
from pyinfra import logger
from pyinfra.api import FunctionCommand

from runbook.reach.kube import ClusterUnanswered
from runbook.run import reads

PROGRESS_EVERY_S = 5


def _check(probe, done):
    try:
        return done(probe())
    except ClusterUnanswered as e:
        return False, f"the cluster does not answer ({e})"


def poll(host, what: str, probe, done, timeout_s: int, interval_s: float = 0.5):
    """Poll ``probe()`` until ``done(seen)`` holds or ``timeout_s`` passes, logging progress
    every few seconds. Returns ``(held, words)``: whether it held, and the last state in words.

    + what: what is awaited, for progress messages
    + probe: callable reading live state on the host; its result is ``seen``
    + done: callable ``done(seen) -> (bool, str)``: whether it holds, and the state in words

    A probe that finds the cluster not answering (``ClusterUnanswered``) is a state like any
    other: the wait goes on, and says so.

        held, last = poll(host, "the lab lock", try_lock, lambda said: (said == "taken", said), 60)
    """
    start = time.monotonic()
    next_report = start + PROGRESS_EVERY_S
    while True:
        held, words = _check(probe, done)
        elapsed = time.monotonic() - start
        if held or elapsed >= timeout_s:
            return held, words
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + PROGRESS_EVERY_S
            logger.info(f"{host.print_prefix}waiting for {what} ({elapsed:.0f}s): {words}")
        gevent.sleep(interval_s)


def until(what: str, probe, done, timeout_s: int) -> FunctionCommand:
    """A command that polls a live condition on the host (see ``poll``) and fails the host on
    timeout, naming ``what`` and the last state seen.

        yield until("Pod gpu-lab/cuda-probe Running",
                    lambda: host.get_fact(KubeObjects, resources="pod/cuda-probe", namespace="gpu-lab"),
                    lambda pods: (running(pods), describe(pods)), 60)
    """

    def wait(state, host):
        start = time.monotonic()
        held, words = poll(host, what, probe, done, timeout_s)
        reads.moved(host)
        if held:
            logger.info(f"{host.print_prefix}{what}: after {time.monotonic() - start:.1f}s ({words})")
        else:
            step = ", ".join(state.get_op_meta(host.executing_op_hash).names)
            logger.error(
                f"{host.print_prefix}{step}: timed out after {timeout_s}s waiting for {what}; last seen: {words}"
            )
        return held

    wait.__name__ = f"wait for {what}"
    return FunctionCommand(wait, (), {})


def awaited(what: str, seen, probe, done, timeout_s: int):
    """Yield a wait for ``done`` only when it does not hold for ``seen``, the state the run read
    (an operation's body); the wait itself polls ``probe`` live."""
    if not done(seen)[0]:
        yield until(what, probe, done, timeout_s)


def failure(message: str) -> FunctionCommand:
    """A command that fails the host's run with ``message``, after earlier commands ran."""

    def fail(state, host):
        logger.error(f"{host.print_prefix}{message}")
        return False

    return FunctionCommand(fail, (), {})
