"""The repair of real nodes (only ``pyinfra nodes.py fix.py`` imports this, and the kubernetes
client with it): each node planned from the audit's own judgment of it
(``gpuop.repair_plan``), every node read at once; then one rollout, from this machine, one node at
a time in the order of their names: taken out of service, fixed, restarted, proven and put back,
the rollout stopped at the first node that fails. A healthy node is never cordoned; a repaired
fleet yields no command.
"""

import os
import shlex
import socket
import weakref
from dataclasses import dataclass, field

from kubernetes import client
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import DeployError

from facts.node import NodeRuntime, node_read
from gpuop import drain as nodes
from gpuop.kubeapi import api_client, in_words
from gpuop.layout import backup_of
from gpuop.repair_plan import plan_lines, plan_node
from gpuop.textfile import repair_registry, write_reports
from gpuop.view import node_view

from .files import inline_write
from .node_audit import cluster_objects

_RUNS = weakref.WeakKeyDictionary()  # pyinfra's State -> the rollout of that run


@dataclass
class _Node:
    """A node to put through the rollout: its pyinfra host, its plan and its own knobs."""
    host: object
    plan: dict
    knobs: object
    runtime_class: str
    left_cordoned: bool


@dataclass
class _Rollout:
    plans: dict = field(default_factory=dict)  # node name -> its plan, every node read
    nodes: dict = field(default_factory=dict)  # node name -> _Node, to put through the rollout
    outcomes: dict = field(default_factory=dict)  # node name -> what happened to it
    stopped: str = ""  # the node, step and what was seen where the rollout stopped
    holder: str = field(default_factory=lambda: nodes.holder_of(socket.gethostname(), os.getpid()))


def rollout_of(state) -> _Rollout:
    return _RUNS.setdefault(state, _Rollout())


def _gpu_class(objects: list, handler: str) -> str:
    return next((o["metadata"]["name"] for o in objects if o["kind"] == "RuntimeClass" and o.get("handler") == handler), "")


def _failed(words: str) -> FunctionCommand:
    """The host fails, said in one sentence (an exception raised here would print a traceback)."""
    def say(state, host):
        logger.error(f"{host.print_prefix}{words}")
        return False
    return FunctionCommand(say, (), {})


@operation()
def planned_repair(knobs):
    """
    Plan one real node's repair from its one read and the cluster's (read once for the run), and
    say the plan (``--dry`` stops there): which file changes and how, the restart, the Pods a drain
    evicts. Nothing changes here; the rollout (``rolled_out``) acts on the plans. A node gpuop
    cannot repair is said, and fails; a healthy node left cordoned by an earlier run is planned
    back into service.

    + knobs: the node's knobs (``gpuop.knobs.NodeKnobs``)

    .. code:: python

        planned_repair(knobs=parse_node_knobs(host.data))
    """
    read = host.get_fact(NodeRuntime, crictl=knobs.crictl_binary, _timeout=knobs.node_read_timeout_s)
    try:
        objects = cluster_objects(host.state, knobs.kubeconfig, knobs.kube_context, knobs.cluster_read_timeout_s)
    except DeployError as e:
        yield _failed(str(e))
        return
    name = knobs.node_name or read["hostname"] or host.name
    plan = plan_node(name, read, node_view(read), objects, knobs.gpu_handler)
    rollout_of(host.state).plans[name] = plan
    for line in plan_lines(plan):
        logger.info(f"{host.print_prefix}{line}")
    try:
        left = nodes.cordoned_by_gpuop(client.CoreV1Api(api_client(knobs.kubeconfig, knobs.kube_context)), name)
    except Exception as e:
        yield _failed(f"node {name}: its Node cannot be read: {in_words(e, knobs.cluster_read_timeout_s)}")
        return
    if plan["action"] == "blocked":
        yield _failed(f"node {name} not repaired: {plan['why']}")
        return
    if plan["action"] == "repair" or left:
        # the Host itself: pyinfra's ``host`` is whichever host runs, and the rollout runs on this machine's
        this = host.state.inventory.get_host(host.name)
        rollout_of(host.state).nodes[name] = _Node(this, plan, knobs, _gpu_class(objects, knobs.gpu_handler), left)


def outcome(rollout: _Rollout, name: str) -> str:
    """What the run did to node ``name``, in one word or a few."""
    plan = rollout.plans[name]
    if name in rollout.outcomes:
        return rollout.outcomes[name]
    if plan["action"] == "blocked":
        return "not repaired"
    if name in rollout.nodes:
        return "untouched (the rollout stopped)" if rollout.stopped else "planned"
    return "nothing to do"


def _reported(rollout: _Rollout, report: str, textfile: str):
    """The run's JSON (each node's plan and outcome) and textfile (``gpuop_node_repaired``) on this machine."""
    doc = {"nodes": {name: {**{k: v for k, v in plan.items() if k != "file"},
                            "file": plan["file"] and {k: plan["file"][k] for k in ("path", "diff")},
                            "outcome": outcome(rollout, name)} for name, plan in sorted(rollout.plans.items())},
           "stopped": rollout.stopped}
    write_reports(doc, report, textfile, repair_registry)


@operation(is_idempotent=False)
def rolled_out(kubeconfig: str, context: str, namespace: str, report: str = "", textfile: str = ""):
    """
    Put every planned node through the repair, one at a time in the order of their names, under
    the cluster's repair lock (a Lease: a second run is refused by name): cordon (marked as
    gpuop's), drain (``gpuop.drain``), the file written (the one before kept beside it), the
    restart forecast asked of the node's own binary (a restart it refuses never happens: the
    file is put back, the node uncordoned), containerd restarted with the node's
    ``containerd_restart``, proven (CRI loads the handler, kubelet Ready, a probe Pod of the GPU
    RuntimeClass runs there), uncordoned. A node that fails stays cordoned with the reason on it
    (``gpuop.io/repair-failed``) and the rollout stops: the nodes after it are untouched.

    + kubeconfig, context: the cluster; namespace: where the Lease and the probe Pods live
    + report, textfile: the run's JSON and Prometheus textfile on this machine; empty: none

    .. code:: python

        rolled_out(kubeconfig="", context="prod", namespace="default")
    """
    rollout = rollout_of(host.state)
    if not rollout.nodes:  # nothing to repair: a repaired fleet's rerun changes nothing
        if host.state.is_executing:
            _reported(rollout, report, textfile)
        return

    def roll(state, host):
        api = api_client(kubeconfig, context)
        try:
            nodes.lock(api, namespace, rollout.holder)
        except Exception as e:
            rollout.stopped = f"the lock: {e if isinstance(e, nodes.Stalled) else in_words(e, 20)}"
        try:
            for name in sorted(rollout.nodes):
                if rollout.stopped:
                    logger.error(f"{rollout.nodes[name].host.print_prefix}node {name} untouched: the rollout "
                                 f"stopped at {rollout.stopped}")
                    continue
                _repair(api, name, rollout.nodes[name], rollout, namespace)
        finally:
            if not rollout.stopped.startswith("the lock"):
                nodes.unlock(api, namespace, rollout.holder)
        for name in sorted(rollout.plans):
            logger.info(f"repair: {name}: {outcome(rollout, name)}")
        _reported(rollout, report, textfile)
        if rollout.stopped:
            logger.error(f"{host.print_prefix}the repair stopped at {rollout.stopped}")
        return not rollout.stopped

    yield FunctionCommand(roll, (), {})


def _repair(api, name: str, node: _Node, rollout: _Rollout, namespace: str):
    """One node through the repair's steps (see ``rolled_out``); its outcome in ``rollout``."""
    core, plan, knobs, target = client.CoreV1Api(api), node.plan, node.knobs, node.host
    handler = knobs.gpu_handler

    def say(words):
        logger.info(f"{target.print_prefix}{words}")
        nodes.renew(api, namespace)

    def on_node(what: str, command: str, timeout_s: int) -> list:
        ok, out = target.run_shell_command(StringCommand(command), _timeout=timeout_s)
        if not ok:
            raise nodes.Stalled(f"{what} failed on {name}: {out.stderr or out.stdout or 'no words'}")
        return out.stdout_lines

    def seen_now() -> dict:
        return node_view(NodeRuntime().process(on_node("the node's read", node_read(knobs.crictl_binary),
                                                       knobs.node_read_timeout_s)))

    step, ours = "cordon", False
    try:
        if plan["action"] == "none":  # healthy, cordoned by a run that stopped or died: put back
            nodes.uncordon(core, name)
            say(f"node {name}: healthy, and still cordoned by an earlier gpuop run: uncordoned")
            rollout.outcomes[name] = "uncordoned"
            return
        ours = nodes.cordon(core, name, rollout.holder)
        say(f"node {name}: cordoned" + ("" if ours else " already by someone else: it stays so after the repair"))
        if knobs.drain:
            step = "drain"
            evicted = nodes.drain(api, name, knobs.drain_timeout_s, knobs.drain_unmanaged, say)
            say(f"node {name}: drained ({len(evicted)} Pod(s) evicted{': ' + ', '.join(evicted) if evicted else ''})")
        step, backup = "write", ""
        if plan["file"]:
            path = plan["file"]["path"]
            if plan["file"]["before"] is not None:
                backup = backup_of(path)
                on_node("the backup", f"cp -p {shlex.quote(path)} {shlex.quote(backup)}", knobs.node_read_timeout_s)
            on_node(f"writing {path}", inline_write(path, plan["file"]["after"], "644"), knobs.node_read_timeout_s)
            say(f"node {name}: {path} written" + (f" (the one before kept as {backup})" if backup else ""))
        step = "forecast"
        view = seen_now()
        if view["cri_after_restart"] != "ok" or handler not in view["after_restart"]:
            if plan["file"]:
                on_node("putting the file back", f"mv -f {shlex.quote(backup)} {shlex.quote(path)}" if backup
                        else f"rm -f {shlex.quote(path)}", knobs.node_read_timeout_s)
            raise nodes.Stalled(f"containerd {view['version']}'s own merge of the files says a restart gives "
                                f"{','.join(view['after_restart']) or 'nothing'} with CRI {view['cri_after_restart']} "
                                f"({view.get('restart_reason') or ''}): not restarted, the file put back")
        step = "restart"
        on_node("the restart", knobs.containerd_restart, knobs.restart_timeout_s)
        step = "CRI"

        def cri_holds():
            now = seen_now()
            return (now["loaded_from"] == "cri" and handler in now["loaded"],
                    f"loaded {','.join(now['loaded']) or '-'} ({now['loaded_from']})")
        nodes.wait(f"containerd on {name} to load {handler}", cri_holds, knobs.restart_timeout_s, say)
        step = "Ready"

        def ready():
            conditions = core.read_node(name).status.conditions or []
            cond = next((c for c in conditions if c.type == "Ready"), None)
            return (cond is not None and cond.status == "True",
                    f"Ready {cond.status if cond else 'unknown'} ({cond.message if cond else ''})")
        nodes.wait(f"node {name} Ready", ready, knobs.restart_timeout_s, say)
        if node.runtime_class:
            step = "probe"
            nodes.probe(api, name, node.runtime_class, knobs.node_pod_image, namespace, knobs.restart_timeout_s, say)
            say(f"node {name}: a probe Pod of RuntimeClass {node.runtime_class} ran there")
        step = "uncordon"
        if ours:
            nodes.uncordon(core, name)
        say(f"node {name}: repaired and back in service")
        rollout.outcomes[name] = "repaired"
    except Exception as e:  # one sentence: no library's traceback reaches the run's output
        words = str(e) if isinstance(e, nodes.Stalled) else in_words(e, knobs.restart_timeout_s)
        rollout.stopped = f"node {name}, step {step}: {words}"
        rollout.outcomes[name] = f"failed at {step}"
        try:
            if step in ("drain", "forecast"):  # nothing on it changed: back in service, untouched
                if ours:
                    nodes.uncordon(core, name)
            else:  # stays cordoned, saying why
                nodes.mark_failed(core, name, f"{step}: {words}")
        except Exception as put_back:
            logger.error(f"{target.print_prefix}node {name}: {in_words(put_back, 5)}")
        logger.error(f"{target.print_prefix}the repair stopped: {rollout.stopped}")
