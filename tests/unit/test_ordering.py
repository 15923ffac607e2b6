"""gpuop's operation order is pyinfra's own, to the line, without reading source files."""

import logging
import sys
import types

import pyinfra
import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.state import StateStage
from pyinfra.api.util import get_operation_order_from_stack
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import server

from operations import ordering

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
    seen.append((get_operation_order_from_stack(state), ordering.operation_order(state)))


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
    exec(code, {"step_one": lambda: step_one(state, seen),
                "step_two": lambda arg: step_two(state, seen, arg)})
    assert len(seen) == 2
    for pyinfra_s, ours in seen:
        assert ours == pyinfra_s
    if deploy_filename:  # the file's number (CLI only), then the deploy file's line of the call
        lead = [2] if cli else []
        assert seen[0][1][:len(lead) + 1] == lead + [2]  # step_one()
        assert seen[1][1][:len(lead) + 1] == lead + [5]  # step_two( on a call of three lines


@pytest.fixture
def pyinfra_s_own(monkeypatch):
    """pyinfra's own ordering function back after the test, and install() not yet called."""
    module = sys.modules["pyinfra.api.operation"]
    monkeypatch.setattr(module, "get_operation_order_from_stack", get_operation_order_from_stack)
    ordering.install.cache_clear()
    yield module
    ordering.install.cache_clear()


def test_pyinfra_orders_a_real_operation_with_it(monkeypatch, pyinfra_s_own):
    """An operation called as a CLI deploy calls it: pyinfra asks the installed function, and
    the order it records is the function's answer."""
    asked = []

    def spy(state):
        asked.append(ordering_s(state))
        return asked[-1]

    ordering_s = ordering.operation_order
    monkeypatch.setattr(ordering, "operation_order", spy)
    monkeypatch.setattr(pyinfra, "is_cli", True)
    assert ordering.install() is True
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
        assert ordering.install() is False
    assert pyinfra_s_own.get_operation_order_from_stack is get_operation_order_from_stack
    assert ("gpuop: pyinfra is 3.11.0, and the faster operation order was proven on 3.10.0 only: "
            "pyinfra's own is kept") in caplog.text


def test_the_pinned_pyinfra_is_the_one_it_was_proven_on():
    pinned = next(line.split("==")[1].strip() for line in open("requirements.txt")
                  if line.startswith("pyinfra=="))
    assert ordering.PROVEN_ON == pinned == pyinfra.__version__
