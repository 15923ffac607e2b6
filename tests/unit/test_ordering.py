"""gpuop's operation order is pyinfra's own, to the line, without reading source files."""

import sys
import types

import pyinfra
import pytest
from pyinfra.api.util import get_operation_order_from_stack

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


def test_install_gives_pyinfra_the_order(monkeypatch):
    module = sys.modules["pyinfra.api.operation"]
    monkeypatch.setattr(module, "get_operation_order_from_stack", module.get_operation_order_from_stack)
    ordering.install()
    assert sys.modules["pyinfra.api.operation"].get_operation_order_from_stack is ordering.operation_order
