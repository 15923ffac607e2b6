"""gpuop's operation order is pyinfra's own, to the line, without reading source files; its
global arguments are pyinfra's answer, asked once; its process ends without the last collections."""

import logging
import subprocess
import sys
import types

import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State, arguments, facts
from pyinfra.api.state import StateStage
from pyinfra.api.util import get_operation_order_from_stack
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import server

from runbook.run import overhead

DEPLOY = "deploy_under_test.py"
# A deploy file as pyinfra runs one: compiled and exec'd, calling down through functions of
# other files (this test module) to where pyinfra asks for the order.
DEPLOY_SOURCE = """
step_one()

if True:
    step_two(
        "an argument on its own line",
    )
"""


def asked_from_pyinfra(state, seen):
    # Both are asked from the same line, so each sees the same stack.
    seen.append((get_operation_order_from_stack(state), overhead.operation_order(state)))


def step_one(state, seen):
    asked_from_pyinfra(state, seen)


def step_two(state, seen, _argument):
    helper = lambda: asked_from_pyinfra(state, seen)  # noqa: E731 - a frame more
    helper()


@pytest.mark.parametrize("cli", [True, False])
@pytest.mark.parametrize("deploy_filename", [DEPLOY, ""])
def test_operation_order_is_pyinfra_s(monkeypatch, cli, deploy_filename):
    monkeypatch.setattr(pyinfra, "is_cli", cli)
    state = types.SimpleNamespace(current_deploy_filename=deploy_filename, current_op_file_number=2)
    seen = []
    code = compile(DEPLOY_SOURCE, DEPLOY, "exec")
    exec(code, {"step_one": lambda: step_one(state, seen), "step_two": lambda arg: step_two(state, seen, arg)})
    assert len(seen) == 2
    for pyinfra_s, ours in seen:
        assert ours == pyinfra_s
    if deploy_filename:  # the file's number (CLI only), then the deploy file's line of the call
        lead = [2] if cli else []
        assert seen[0][1][: len(lead) + 1] == lead + [2]  # step_one()
        assert seen[1][1][: len(lead) + 1] == lead + [5]  # step_two( on a call of three lines


@pytest.fixture
def pyinfra_s_own(monkeypatch):
    """pyinfra's own functions back after the test, and install() not yet called."""
    module = sys.modules["pyinfra.api.operation"]
    monkeypatch.setattr(module, "get_operation_order_from_stack", get_operation_order_from_stack)
    monkeypatch.setattr(arguments, "all_global_arguments", overhead._own_global_arguments)
    monkeypatch.setattr(facts, "all_global_arguments", overhead._own_global_arguments)
    overhead.install.cache_clear()
    yield module
    overhead.install.cache_clear()


def test_pyinfra_orders_a_real_operation_with_it(monkeypatch, pyinfra_s_own):
    """An operation called as a CLI deploy calls it: pyinfra asks the installed function, and
    the order it records is the function's answer."""
    asked = []

    def spy(state):
        asked.append(ordering_s(state))
        return asked[-1]

    ordering_s = overhead.operation_order
    monkeypatch.setattr(overhead, "operation_order", spy)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    assert overhead.install() is True
    inventory = Inventory((["@local"], {}))
    state = State(inventory, Config())
    state.current_deploy_filename = __file__
    state.set_stage(StateStage.Prepare)
    with ctx_state.use(state), ctx_host.use(inventory.get_host("@local")):
        server.shell(commands=["true"])
    assert len(asked) == 1
    (op_hash,) = state.get_op_order()
    assert list(state.get_op_meta(op_hash).op_order) == asked[0]


def test_install_refuses_another_pyinfra_and_keeps_its_own(monkeypatch, caplog, pyinfra_s_own):
    monkeypatch.setattr(pyinfra, "__version__", "3.11.0")
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        assert overhead.install() is False
    assert pyinfra_s_own.get_operation_order_from_stack is get_operation_order_from_stack
    assert arguments.all_global_arguments is overhead._own_global_arguments
    assert (
        "gpuop: pyinfra is 3.11.0, and the faster planning was proven on 3.10.0 only: pyinfra's own is kept"
    ) in caplog.text


def test_the_global_arguments_are_pyinfra_s_own_answer_asked_once(monkeypatch, pyinfra_s_own):
    own = overhead._own_global_arguments()
    assert ("_sudo", bool) in own and ("_timeout", int) in own
    calls = []
    monkeypatch.setattr(overhead, "_own_global_arguments", lambda: calls.append(1) or own)
    overhead.global_arguments.cache_clear()
    assert overhead.install() is True
    assert arguments.all_global_arguments is facts.all_global_arguments is overhead.global_arguments
    assert [arguments.all_global_arguments() for _ in range(5)] == [own] * 5 and calls == [1]
    # pyinfra's callers get the same: an operation's global arguments popped from its kwargs
    inventory = Inventory((["@local"], {}))
    kwargs = {"_sudo": True, "_timeout": 7, "commands": ["true"]}
    popped, found = arguments.pop_global_arguments(State(inventory, Config()), inventory.get_host("@local"), kwargs)
    assert popped["_sudo"] is True and popped["_timeout"] == 7 and set(found) == {"_sudo", "_timeout"}
    assert kwargs == {"commands": ["true"]} and calls == [1]
    overhead.global_arguments.cache_clear()


def test_the_pinned_pyinfra_is_the_one_it_was_proven_on():
    pinned = next(line.split("==")[1].strip() for line in open("requirements.txt") if line.startswith("pyinfra=="))
    assert overhead.PROVEN_ON == pinned == pyinfra.__version__


def test_the_process_ends_frozen_after_every_later_exit_hook(tmp_path):
    """install() adds one exit hook however often it is called, and it freezes every object: a
    hook registered before it (as logging's is) runs after the freeze, and still runs; one
    registered after it runs first, on a collector still at work. What the run printed and never
    flushed (pyinfra's --json, 1 MB here) still reaches its reader whole: Python flushes the
    standard streams itself."""
    script = tmp_path / "ends.py"
    script.write_text(
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('earlier hook: frozen', gc.get_freeze_count() > 0))\n"
        "from runbook.run import overhead\n"
        "before = atexit._ncallbacks()\n"
        "overhead.install(); overhead.install.cache_clear(); overhead.install()\n"
        "print('hooks added', atexit._ncallbacks() - before)\n"
        "atexit.register(lambda: print('later hook: frozen', gc.get_freeze_count() > 0))\n"
        "sys.stdout.write('x' * 1_000_000 + '\\n')\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "hooks added 1",
        "x" * 1_000_000,
        "later hook: frozen False",
        "earlier hook: frozen True",
    ]
