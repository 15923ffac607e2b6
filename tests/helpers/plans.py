"""A node's repair plan as the fleet repair makes it: from the gaps of the one judgment."""

from gpuop.judgment.rules import judge
from gpuop.repair.plan import plan_node


def plan_of(name: str, read: dict, view: dict, objects: list, handler: str, toolkit: dict | None = None) -> dict:
    """``plan_node`` of node ``name``, given the gaps ``judge`` finds there.

    plan_of("gpu-a", read, node_view(read), objects, "nvidia")["action"] -> "repair"
    """
    return plan_node(name, read, view, judge(view, objects, name, handler)["gaps"], objects, handler, toolkit)
