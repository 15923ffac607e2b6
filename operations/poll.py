"""Waiting on a live condition: poll a fact, report progress, fail with the last state seen."""

import time

import gevent
from pyinfra import logger
from pyinfra.api import FunctionCommand

PROGRESS_EVERY_S = 5


def until(what: str, probe, done, timeout_s: int, interval_s: float = 0.5) -> FunctionCommand:
    """A command that polls ``probe()`` on the host until ``done(seen)`` holds.

    + what: what is awaited, for progress and failure messages
    + probe: callable reading live state (facts); its result is ``seen``
    + done: callable ``done(seen) -> (bool, str)``: whether it holds, and the state in words
    + timeout_s: give up after this long, naming ``what`` and the last state seen

        yield until("Pod gpu-lab/cuda-probe scheduling decided",
                    lambda: host.get_fact(KubeObjects, resource="pod/cuda-probe", namespace="gpu-lab"),
                    lambda pods: (bool(pods and pod_scheduled(pods[0])), describe(pods)), 60)
    """

    def wait(state, host):
        start = time.monotonic()
        reported = start
        while True:
            ok, seen = done(probe())
            elapsed = time.monotonic() - start
            if ok:
                logger.info(f"{host.print_prefix}{what}: after {elapsed:.1f}s ({seen})")
                return True
            if elapsed >= timeout_s:
                logger.error(
                    f"{host.print_prefix}timed out after {timeout_s}s waiting for {what}; "
                    f"last seen: {seen}"
                )
                return False
            if time.monotonic() - reported >= PROGRESS_EVERY_S:
                reported = time.monotonic()
                logger.info(f"{host.print_prefix}waiting for {what} ({elapsed:.0f}s): {seen}")
            gevent.sleep(interval_s)

    wait.__name__ = f"wait for {what}"
    return FunctionCommand(wait, (), {})


def failure(message: str) -> FunctionCommand:
    """A command that fails the host's run with ``message``, after earlier commands ran."""

    def fail(state, host):
        logger.error(f"{host.print_prefix}{message}")
        return False

    return FunctionCommand(fail, (), {})
