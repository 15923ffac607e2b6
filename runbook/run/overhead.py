"""
pyinfra's own overhead, made cheaper where its work cannot change what a run does.

**The operation order, read from the call stack's frames themselves.** In CLI mode pyinfra orders each operation by the
line numbers of the deploy code that called it
(``pyinfra.api.util.get_operation_order_from_stack``). It gets them from ``inspect.stack()``,
which also looks up every frame's source file and module; for the deploy file, which pyinfra
execs rather than imports, ``inspect.getmodule`` scans every loaded module, three times per
operation. Measured on this playbook (27 operations), that was two thirds of planning a host,
0.1-0.2 s per host, paid in turn for every host. The frames hold the same line numbers:
``operation_order`` returns exactly what pyinfra's own function does (tests/unit/test_overhead.py
compares the two, on the pinned pyinfra), without reading a source file.

**The global arguments, typed once.** pyinfra asks ``typing.get_type_hints`` of its
``AllArguments`` TypedDict (``all_global_arguments``) for every fact class it defines and every
operation it plans, and each call evaluates every forward reference again, about 0.4 ms: the
fact classes (defined on import, before any deploy file runs, empty deploy or not) pay 91 calls,
a converged rerun's 27 operations 37 more. The TypedDict does not change while a run lasts;
``global_arguments`` keeps pyinfra's own answer for the operations' calls.

**The exit, without Python's last garbage collections.** As the interpreter ends it clears every
module and collects the cycles that leaves, going over each of the run's objects again: 40-60 ms
of a converged rerun on the lab host, half its batched read. ``freeze_at_exit`` moves every live
object out of the collector's reach (``gc.freeze``) once the run is over, so the objects still
held then are never finalized: the system takes their memory back with the process. Python never
promised ``__del__`` at exit, and nothing of a run waits on one: pyinfra disconnects every host
before, gpuop writes a file only inside a ``with``, and the standard streams and logging's handlers
are flushed by Python and by their own exit hooks, which still run.

The entry points install all three; on any other pyinfra than the one they were proven on,
pyinfra's own functions stay (the exit is Python's, and frozen on any).
"""

import atexit
import functools
import gc
import sys

import pyinfra
from pyinfra import logger
from pyinfra.api import arguments, facts
from pyinfra.api.util import PYINFRA_INSTALL_DIR

PROVEN_ON = "3.10.0"  # the pyinfra whose own function tests/unit/test_overhead.py compares it with


def operation_order(state) -> list:
    """
    The line numbers pyinfra orders an operation by: in CLI mode the deploy file's number, then,
    from the deploy file's frame down to the operation's call, each frame's line, pyinfra's own
    frames left out.

    .. code:: python

        operation_order(host.state)  # [0, 14, 91, 252]: deploy.py:14, runbook/replay/incident.py:91,
            runbook/replay/incident.py:252
    """
    frames = []
    frame = sys._getframe(1)  # the caller: a frame of pyinfra's, left out as its own are
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    # As pyinfra does: no deploy file named, every frame; one named but not in the stack, only
    # the innermost frame (the caller's, pyinfra's own, so none).
    start = 0
    if state.current_deploy_filename:
        for start, frame in enumerate(frames):
            if frame.f_code.co_filename == state.current_deploy_filename:
                break
    order = [state.current_op_file_number] if pyinfra.is_cli else []
    return order + [f.f_lineno for f in frames[start:] if not f.f_code.co_filename.startswith(PYINFRA_INSTALL_DIR)]


_own_global_arguments = arguments.all_global_arguments


@functools.cache
def global_arguments() -> list:
    """pyinfra's ``all_global_arguments()``, asked once: ``[(name, type), ...]`` of every global
    argument (``_sudo``, ``_timeout``...), which its TypedDicts fix for the whole run.

        global_arguments()[0] -> ("_sudo", bool)
    """
    return _own_global_arguments()


@functools.cache  # one hook per process, however often installed
def freeze_at_exit():
    """
    Have the process end without Python's last garbage collections (see above): ``gc.freeze()``
    among the exit hooks, after every hook registered later, before those registered earlier.

    .. code:: python

        freeze_at_exit()  # once per process, by install()
    """
    atexit.register(gc.freeze)


@functools.cache  # once per process: every host's deploy file calls it
def install() -> bool:
    """
    Have pyinfra order operations with ``operation_order`` and read its global arguments from
    ``global_arguments``, if this is the pyinfra they were proven on; on another one, say so and
    leave pyinfra's own functions. Either way the process ends frozen (``freeze_at_exit``).
    Returns whether pyinfra's functions were replaced.

    .. code:: python

        overhead.install()  # first thing in deploy.py, fix.py and audit.py
    """
    freeze_at_exit()
    if pyinfra.__version__ != PROVEN_ON:
        logger.warning(
            f"gpuop: pyinfra is {pyinfra.__version__}, and the faster planning was "
            f"proven on {PROVEN_ON} only: pyinfra's own is kept (planning is slower)"
        )
        return False
    sys.modules["pyinfra.api.operation"].get_operation_order_from_stack = operation_order
    # pyinfra.api.facts imported the name: both places call it
    arguments.all_global_arguments = facts.all_global_arguments = global_arguments
    return True
