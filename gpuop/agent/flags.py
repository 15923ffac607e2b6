"""The agent's flags, parsed and checked in one place before it starts, as ``gpuop.knobs`` checks
the playbook's: a bad one is one sentence (which flag, what it expects, what it was given) and
exit status 2.

    flags = parse_flags(["--node", "gpu-a", "--interval-s", "60"])   # AgentFlags(node="gpu-a", ...)
    parse_flags(["--node", "gpu-a", "--interval-s", "-1"])
    # FlagError: --interval-s: expected seconds, at least 1, got '-1'
"""

import argparse
import math
import os
import shlex
from dataclasses import dataclass

from gpuop.judgment.condition import REFRESH_S
from gpuop.judgment.node_rules import DRIVER

REQUEST_DEADLINE_S = 10  # each request of the agent's client to the API server (not a flag: a watch has its own)


class FlagError(Exception):
    """A flag the agent cannot run with, in one sentence."""


@dataclass(frozen=True)
class AgentFlags:
    """What one agent runs with: every flag, parsed."""

    node: str  # this node's name (default $NODE_NAME)
    interval_s: float = 60  # the node's read, every this (jittered by up to a tenth)
    heartbeat_s: float = REFRESH_S  # an unchanged condition written again, as node-problem-detector's
    read_deadline_s: float = 150  # the node's whole read
    port: int = 9909  # metrics, /healthz and /readyz (0: none)
    enter: tuple = ()  # the command that enters the host's namespaces (in a host-PID Pod)
    crictl: str = "crictl"
    gpu_handler: str = "nvidia"
    gpu_driver: str = DRIVER
    pod: str = ""  # the agent's own Pod (default $POD_NAME): it carries the restart gate's label
    pod_namespace: str = ""  # its namespace (default $POD_NAMESPACE)
    kubeconfig: str = ""  # empty: the Pod's ServiceAccount, else $KUBECONFIG
    once: bool = False  # judge once and exit
    forget: str = ""  # NAMESPACE/NAME: that DaemonSet's agents stopped, gpuop's conditions and label off every Node

    @property
    def health_bound_s(self) -> float:
        """How long the agent may go without a judgment before ``/healthz`` fails: three of its
        intervals and one whole read's deadline (a read that hangs past that is the agent's own)."""
        return 3 * self.interval_s + self.read_deadline_s


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own words, as one sentence of ours: no usage block
        raise FlagError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpuop-agent", description="The gpuop node agent: its node's runtime judged, as a condition.")
    p.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this node's name (default $NODE_NAME)")
    p.add_argument("--interval-s", default="60", help="seconds between the node's reads (at least 1)")
    p.add_argument("--heartbeat-s", default=str(REFRESH_S), help="an unchanged condition written again every this")
    p.add_argument("--read-deadline-s", default="150", help="the node's whole read's deadline")
    p.add_argument("--port", default="9909", help="metrics, /healthz and /readyz (0: none)")
    p.add_argument("--enter", default="", help="the command that enters the host's namespaces (in a host-PID Pod)")
    p.add_argument("--crictl", default="crictl")
    p.add_argument("--gpu-handler", default="nvidia")
    p.add_argument("--gpu-driver", default=DRIVER)
    p.add_argument("--pod", default=os.environ.get("POD_NAME", ""), help="the agent's own Pod (default $POD_NAME)")
    p.add_argument(
        "--pod-namespace", default=os.environ.get("POD_NAMESPACE", ""), help="its namespace (default $POD_NAMESPACE)"
    )
    p.add_argument("--kubeconfig", default="", help="default: the Pod's ServiceAccount, else $KUBECONFIG")
    p.add_argument("--once", action="store_true", help="judge once and exit (0: no gap, 1: a gap, 2: unknown)")
    p.add_argument(
        "--forget",
        nargs="?",
        const="gpuop-system/gpuop-agent",
        default="",
        metavar="NAMESPACE/DAEMONSET",
        help="uninstall: that DaemonSet deleted, its Pods waited out, then gpuop's conditions and label taken off "
        "every Node (default gpuop-system/gpuop-agent); no --node",
    )
    return p


def _seconds(flag: str, raw: str, least: float, most: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (least <= value <= most):
        raise FlagError(f"{flag}: expected seconds, at least {least:g} and at most {most:g}, got {raw!r}")
    return value


def parse_flags(argv: list | None) -> AgentFlags:
    """The agent's flags from ``argv`` (None: the process's), checked together: the interval at
    least 1 s (0 would spin), the heartbeat at least one interval (a heartbeat is written by a
    judgment), the read's deadline at least 10 s (its sections need that) and within the
    heartbeat, the port a TCP port or 0, the enter command shell words."""
    a = _parser().parse_args(argv)
    if a.forget:
        namespace, _, name = a.forget.partition("/")
        if not (namespace and name) or "/" in name:
            raise FlagError(f"--forget: expected the agents' DaemonSet as NAMESPACE/NAME, got {a.forget!r}")
        return AgentFlags(node="", kubeconfig=a.kubeconfig, forget=a.forget)
    if not a.node:
        raise FlagError("--node (or $NODE_NAME): expected the name of the node this agent judges, got none")
    interval = _seconds("--interval-s", a.interval_s, 1, 86400)
    heartbeat = _seconds("--heartbeat-s", a.heartbeat_s, interval, 86400)
    deadline = _seconds("--read-deadline-s", a.read_deadline_s, 10, heartbeat)
    try:
        port = int(a.port)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise FlagError(f"--port: expected a TCP port from 1 to 65535, or 0 for none, got {a.port!r}")
    try:
        enter = tuple(shlex.split(a.enter))
    except ValueError as e:
        raise FlagError(f"--enter: expected a command in shell words, got {a.enter!r} ({e})") from None
    for flag, value in (("--crictl", a.crictl), ("--gpu-handler", a.gpu_handler), ("--gpu-driver", a.gpu_driver)):
        if not value.strip():
            raise FlagError(f"{flag}: expected a name, got none")
    if bool(a.pod) != bool(a.pod_namespace):
        raise FlagError(
            f"--pod and --pod-namespace: expected both (the agent's own Pod) or neither, got {a.pod!r} and "
            f"{a.pod_namespace!r}"
        )
    return AgentFlags(
        node=a.node,
        interval_s=interval,
        heartbeat_s=heartbeat,
        read_deadline_s=deadline,
        port=port,
        enter=enter,
        crictl=a.crictl,
        gpu_handler=a.gpu_handler,
        gpu_driver=a.gpu_driver,
        pod=a.pod,
        pod_namespace=a.pod_namespace,
        kubeconfig=a.kubeconfig,
        once=a.once,
    )
