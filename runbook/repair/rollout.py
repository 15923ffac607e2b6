"""The repair of real nodes (only ``pyinfra nodes.py fix.py`` imports this, and the kubernetes
client with it): each node planned from the audit's own judgment of it
(``gpuop.repair.plan``), every node read at once; then one rollout, from this machine, in the
order of the nodes' names, at most ``repair_max_unavailable`` at a time: taken out of service,
fixed, restarted, proven and put back, the rollout stopped once more than
``repair_max_failures`` nodes fail. A healthy node is never cordoned; a repaired fleet yields no
command.
"""

import os
import posixpath
import shlex
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime

import gevent
from gevent.pool import Pool
from kubernetes import client
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import DeployError

from gpuop.judgment import crio
from gpuop.judgment.cluster_rules import cluster_gaps
from gpuop.judgment.containerd import release
from gpuop.judgment.rules import judge
from gpuop.judgment.view import LIVE, api_handlers, node_view
from gpuop.layout import node_backup_of
from gpuop.outputs.tables import fleet_table
from gpuop.outputs.textfile import repair_registry, write_reports
from gpuop.reach.kubeapi import api_client, in_words, plain, read_cluster
from gpuop.reach.node_read import node_read
from gpuop.repair import drain, lease, probe
from gpuop.repair.plan import free_devices, free_gpus, plan_lines, plan_node
from runbook.audit.node_audit import cluster_objects
from runbook.reach.node import NodeRuntime, ToolkitDropin
from runbook.run.files import inline_write
from runbook.run.poll import failure
from runbook.run.state import run_of

REQUEST_DEADLINE_S = 20  # each request of the rollout to the API server (a cordon, an eviction, a read)


@dataclass
class _Node:
    """A node to put through the rollout: its pyinfra host, its plan and its own knobs."""

    host: object
    plan: dict
    knobs: object
    runtime_class: str
    left_cordoned: bool  # gpuop's cordon found on it: a run that stopped or died left it, gpuop's to put back
    left_failed: str  # the failure an earlier run marked it with: it goes back into service only once proven


@dataclass
class _Rollout:
    plans: dict = field(default_factory=dict)  # node name -> its plan, every node read
    readers: dict = field(default_factory=dict)  # node name -> (its Host, its knobs), to read it again after
    nodes: dict = field(default_factory=dict)  # node name -> _Node, to put through the rollout
    outcomes: dict = field(default_factory=dict)  # node name -> what happened to it
    phases: dict = field(default_factory=dict)  # node name -> {step: seconds it took}
    failures: list = field(default_factory=list)  # "node N, step S: what was seen", in the order they failed
    evicted: dict = field(default_factory=dict)  # node name -> the Pods its drain evicted or deleted
    backups: dict = field(default_factory=dict)  # node name -> {a file written: where the one before is kept}
    run: str = field(default_factory=lambda: f"{datetime.now():%Y%m%dT%H%M%S}-{os.getpid()}")  # the backups' folder
    renewals: int = 0  # how often the lock was renewed
    lock_lost: str = ""  # how the lock stopped being this run's: nothing changes on a node after it
    stopped: str = ""  # where the rollout stopped: the lock, or the failure one too many
    holder: str = field(default_factory=lambda: lease.holder_of(socket.gethostname(), os.getpid()))


def rollout_of(state) -> _Rollout:
    """This run's rollout (``runbook.run.state``), made at the first node's plan."""
    run = run_of(state)
    if run.rollout is None:
        run.rollout = _Rollout()
    return run.rollout


def _gpu_class(objects: list, handler: str) -> str:
    return next(
        (o["metadata"]["name"] for o in objects if o["kind"] == "RuntimeClass" and o.get("handler") == handler), ""
    )


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
    read = host.get_fact(
        NodeRuntime,
        crictl=knobs.crictl_binary,
        deadline_s=knobs.node_read_timeout_s,
        _timeout=knobs.node_read_timeout_s,
    )
    try:
        objects = cluster_objects(host.state, knobs.kubeconfig, knobs.kube_context, knobs.cluster_read_timeout_s)
    except DeployError as e:
        yield failure(str(e))
        return
    name = knobs.node_name or read["hostname"] or host.name
    view = node_view(read)
    judged = judge(view, objects, name, knobs.gpu_handler, knobs.gpu_driver)
    plan = plan_node(name, read, view, judged["gaps"], objects, knobs.gpu_handler)
    on_crio = view["runtime"] == crio.NAME
    if plan["files"] and (
        on_crio or release(view["version"]) >= (2,) and not view["regenerated"]
    ):  # the toolkit's own drop-in
        config = next(d["config"] for d in read["crios" if on_crio else "containerds"] if d["serves"])
        toolkit = host.get_fact(
            ToolkitDropin,
            config=config,
            dropin=plan["files"][-1]["path"],
            runtime="crio" if on_crio else "containerd",
            _timeout=knobs.node_read_timeout_s,
        )
        if toolkit:
            plan = plan_node(name, read, view, judged["gaps"], objects, knobs.gpu_handler, toolkit)
    rollout_of(host.state).plans[name] = plan
    for line in plan_lines(plan, knobs.drain_policy):
        logger.info(f"{host.print_prefix}{line}")
    try:
        left, left_failed = drain.gpuop_cordon(
            client.CoreV1Api(api_client(knobs.kubeconfig, knobs.kube_context, REQUEST_DEADLINE_S)), name
        )
    except Exception as e:  # noqa: BLE001 (one sentence: no library's traceback reaches the run's output)
        yield failure(f"node {name}: its Node cannot be read: {in_words(e, knobs.cluster_read_timeout_s)}")
        return
    if left and plan["action"] == "none":
        logger.info(
            f"{host.print_prefix}{name}:   cordoned by an earlier gpuop run"
            + (f" that failed there ({left_failed})" if left_failed else "")
            + ": proven (kubelet Ready, a probe Pod), then uncordoned"
        )
    if plan["action"] == "blocked":
        yield failure(f"node {name} not repaired: {plan['why']}")
        return
    # the Host itself: pyinfra's ``host`` is whichever host runs, and the rollout runs on this machine's
    this = host.state.inventory.get_host(host.name)
    rollout_of(host.state).readers[name] = (this, knobs)
    if plan["action"] == "repair" or left:
        rollout_of(host.state).nodes[name] = _Node(
            this, plan, knobs, _gpu_class(objects, knobs.gpu_handler), left, left_failed
        )


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


def audited_after(rollout: _Rollout, kubeconfig: str, context: str) -> dict:
    """The fleet audited again once the rollout is over: every node it planned read again (one
    command each), the cluster read again, judged by the audit's one rule set; its table logged.

        audited_after(rollout, "", "prod")["nodes"]["gpu-a"]["gaps"] -> []
    """
    deadline = max(knobs.cluster_read_timeout_s for _, knobs in rollout.readers.values())
    objects, _ = read_cluster(kubeconfig, context, deadline)
    entries = {}
    for name, (target, knobs) in sorted(rollout.readers.items()):
        ok, out = target.run_shell_command(
            StringCommand(node_read(knobs.crictl_binary, knobs.node_read_timeout_s)), _timeout=knobs.node_read_timeout_s
        )
        if not ok:
            logger.error(f"{target.print_prefix}node {name}: not read again after the rollout")
            continue
        view = node_view(NodeRuntime().process(out.stdout_lines))
        entries[name] = judge(view, objects, name, knobs.gpu_handler, knobs.gpu_driver)
    after = {"nodes": entries, "gaps": cluster_gaps(entries, objects)}
    logger.info("--> the fleet audited again after the rollout:")
    for line in fleet_table(after):
        logger.info(line)
    return after


def _reported(rollout: _Rollout, report: str, textfile: str, after: dict | None = None):
    """The run's JSON (each node's plan and outcome, and the audit after the rollout) and textfile
    (``gpuop_node_repaired``) on this machine."""
    doc = {
        "nodes": {
            name: {
                **{k: v for k, v in plan.items() if k != "files"},
                "files": [
                    {
                        **{k: f[k] for k in ("path", "by", "diff")},
                        "backup": rollout.backups.get(name, {}).get(f["path"]),
                    }
                    for f in plan["files"]
                ],
                "outcome": outcome(rollout, name),
                "evicted": rollout.evicted.get(name, []),
                "phases_s": rollout.phases.get(name, {}),
            }
            for name, plan in sorted(rollout.plans.items())
        },
        "failures": rollout.failures,
        "stopped": rollout.stopped,
        "lock_renewals": rollout.renewals,
        "audit_after": after,
    }
    write_reports(doc, report, textfile, repair_registry)


@operation(is_idempotent=False)
def rolled_out(
    kubeconfig: str,
    context: str,
    namespace: str,
    report: str = "",
    textfile: str = "",
    max_unavailable: int = 1,
    max_failures: int = 0,
    lock_s: int = lease.LEASE_S,
):
    """
    Put every planned node through the repair, in the order of their names, at most
    ``max_unavailable`` at a time, under the cluster's repair lock (a Lease: a second run is
    refused by name): cordon (marked as gpuop's), drain (``gpuop.repair.drain``), the files written
    (each one before kept under /var/lib/gpuop/backup, where no runtime reads), the restart forecast asked of the node's
        own binary (a
    restart it refuses never happens: the files are put back, the node uncordoned), containerd restarted with the node's
    ``containerd_restart``, proven (CRI loads the handler, kubelet Ready, a probe Pod of the GPU
    RuntimeClass runs there), uncordoned. A node that fails stays cordoned with the reason on it
    (``gpuop.io/repair-failed``); once more than ``max_failures`` nodes failed the rollout stops:
    the nodes in flight finish, the nodes not begun are untouched.

    + kubeconfig, context: the cluster; namespace: where the Lease and the probe Pods live
    + report, textfile: the run's JSON and Prometheus textfile on this machine; empty: none
    + max_unavailable: how many nodes are out of service at once
    + max_failures: how many failed nodes the rollout goes on past
    + lock_s: the Lease's duration; a timer of its own renews it every third of it

    .. code:: python

        rolled_out(kubeconfig="", context="prod", namespace="default")
    """
    rollout = rollout_of(host.state)
    if not rollout.nodes:  # nothing to repair: a repaired fleet's rerun changes nothing
        if host.state.is_executing:
            _reported(rollout, report, textfile)
        return

    def roll(state, host):
        api = api_client(kubeconfig, context, REQUEST_DEADLINE_S)
        keeper = None
        try:
            taken = lease.lock(api, namespace, rollout.holder, lock_s)
            if taken:
                logger.info(f"repair: the Lease {namespace}/{lease.LEASE} taken over from a run that stopped: {taken}")
            keeper = gevent.spawn(_lock_kept, api, rollout, namespace, lock_s)
        except Exception as e:  # noqa: BLE001 (the lock not had stops the rollout, said in one sentence)
            rollout.stopped = f"the lock: {e if isinstance(e, drain.Stalled) else in_words(e, 20)}"
        if keeper is not None:  # under the lock, every probe Pod is one a killed run left
            try:
                left = probe.probes_left(api, namespace)
                if left:
                    logger.info(f"repair: deleted the probe Pod(s) a killed run left: {', '.join(left)}")
            except Exception as e:  # noqa: BLE001 (its deadline ends such a Pod anyway)
                logger.warning(f"repair: the probe Pods a killed run may have left were not read: {in_words(e, 20)}")
        try:
            _rolled(api, rollout, namespace, max_unavailable, max_failures)
        finally:
            if keeper is not None:
                keeper.kill()
            if not rollout.stopped.startswith("the lock"):
                try:
                    lease.unlock(api, namespace, rollout.holder)
                except Exception as e:  # noqa: BLE001 (one sentence: the client's own error handling can fail too)
                    logger.warning(
                        f"repair: the Lease was not given back ({in_words(e, REQUEST_DEADLINE_S)}); "
                        f"it lapses {lock_s}s after its last renewal"
                    )
        for name in sorted(rollout.plans):
            logger.info(f"repair: {name}: {outcome(rollout, name)}")
        try:
            after = audited_after(rollout, kubeconfig, context)
        except Exception as e:  # noqa: BLE001 (the repair's own outcome stands; the audit after is said not done)
            logger.error(f"{host.print_prefix}the audit after the rollout was not made: {in_words(e, 20)}")
            after = None
        _reported(rollout, report, textfile, after)
        if rollout.stopped:
            logger.error(f"{host.print_prefix}the repair stopped at {rollout.stopped}")
        elif rollout.failures:
            logger.error(f"{host.print_prefix}{len(rollout.failures)} node(s) failed: {'; '.join(rollout.failures)}")
        remaining = sum(len(n["gaps"]) for n in after["nodes"].values()) + len(after["gaps"]) if after else 0
        if remaining:
            logger.error(f"{host.print_prefix}{remaining} gap(s) left after the rollout")
        return not rollout.stopped and not rollout.failures and after is not None and not remaining

    yield FunctionCommand(roll, (), {})


def _lock_kept(api, rollout: _Rollout, namespace: str, lock_s: int):
    """The repair's Lease renewed every third of ``lock_s`` for as long as the run lasts, whatever
    it waits on (a node's read, a restart, a drain: greenlets, as pyinfra's own commands are); a
    renewal that finds it another run's stops the rollout before its next change to any node. A
    renewal the API server does not answer is tried again at the next one."""
    every = lock_s / 3
    while True:
        gevent.sleep(every)
        try:
            lease.renew(api, namespace, rollout.holder)
            rollout.renewals += 1
        except lease.LockLost as e:
            rollout.lock_lost = str(e)
            rollout.stopped = rollout.stopped or f"the lock: {e}"
            logger.error(f"the repair's lock is lost: {e}; the run stops before its next change to a node")
            return
        except Exception as e:  # noqa: BLE001 (the API server's silence: the Lease lasts 3 renewals)
            logger.warning(
                f"the repair's Lease was not renewed now ({in_words(e, REQUEST_DEADLINE_S)}); "
                f"tried again in {every:.0f}s"
            )


def _rolled(api, rollout: _Rollout, namespace: str, max_unavailable: int, max_failures: int):
    """Every planned node through ``_repair``, in name order, ``max_unavailable`` at once (greenlets:
    pyinfra's own concurrency); none begun once more than ``max_failures`` failed."""

    def stops():  # the failure one too many stops the rollout
        if not rollout.stopped and len(rollout.failures) > max_failures:
            rollout.stopped = rollout.failures[max_failures]
        return rollout.stopped

    pool = Pool(max_unavailable)
    for name in sorted(rollout.nodes):
        pool.wait_available()
        if stops():
            logger.error(
                f"{rollout.nodes[name].host.print_prefix}node {name} untouched: the rollout "
                f"stopped at {rollout.stopped}"
            )
            continue
        pool.spawn(_repair, api, name, rollout.nodes[name], rollout, namespace, max_failures)
    pool.join()
    stops()


class _Steps:
    """One node's repair, step by step (see ``rolled_out``): each method is one step, raising
    ``Stalled`` with what was seen where it does not happen."""

    UNTOUCHED = ("cordon", "drain", "forecast")  # a failure there leaves the node as it was: back in service

    def __init__(self, api, name: str, node: _Node, rollout: _Rollout, namespace: str):
        self.api, self.core, self.name, self.node, self.rollout = api, client.CoreV1Api(api), name, node, rollout
        self.knobs, self.target, self.namespace = node.knobs, node.host, namespace
        self.ours, self.before, self.beat = node.left_cordoned, None, None
        self.backups = rollout.backups.setdefault(name, {})

    def say(self, words: str):
        logger.info(f"{self.target.print_prefix}{words}")

    def ran(self, what: str, command: str, timeout_s: int, deadline: str) -> tuple:
        """``command`` run on the node: (whether it succeeded, its output); ``Stalled`` naming
        ``what`` and its ``deadline`` knob where it does not end in time (pyinfra says only
        TimeoutError, which is no API server's)."""
        try:
            return self.target.run_shell_command(StringCommand(command), _timeout=timeout_s)
        except TimeoutError:
            raise drain.Stalled(f"{what} did not end on {self.name} within {deadline}={timeout_s}s") from None

    def on_node(self, what: str, command: str, timeout_s: int) -> list:
        ok, out = self.ran(what, command, timeout_s, "node_read_timeout_s")
        if not ok:
            raise drain.Stalled(f"{what} failed on {self.name}: {out.stderr or out.stdout or 'no words'}")
        return out.stdout_lines

    def seen_now(self) -> dict:
        """The node's view, read again (one command)."""
        lines = self.on_node(
            "the node's read",
            node_read(self.knobs.crictl_binary, self.knobs.node_read_timeout_s),
            self.knobs.node_read_timeout_s,
        )
        return node_view(NodeRuntime().process(lines))

    def cordon(self):
        self.ours = drain.cordon(self.core, self.name, self.rollout.holder)
        self.say(
            f"node {self.name}: cordoned"
            + ("" if self.ours else " already by someone else: it stays so after the repair")
        )

    def drain(self):
        policy = self.knobs.drain_policy
        if policy.drain:
            evicted = drain.drain(self.api, self.name, policy, self.say)
            self.rollout.evicted[self.name] = evicted
            self.say(
                f"node {self.name}: drained ({len(evicted)} Pod(s) "
                f"evicted{': ' + ', '.join(evicted) if evicted else ''})"
            )
        else:
            self.say(f"node {self.name}: not drained (drain=false): its Pods run on through the restart")

    def write(self):
        """Each planned file, the one before kept where no runtime reads (``node_backup_of``)."""
        timeout_s = self.knobs.node_read_timeout_s
        for file in self.node.plan["files"]:
            path = file["path"]
            if file["before"] is not None:
                kept = self.backups[path] = node_backup_of(path, self.rollout.run)
                self.on_node(
                    "the backup",
                    f"mkdir -p {shlex.quote(posixpath.dirname(kept))} && cp -p {shlex.quote(path)} {shlex.quote(kept)}",
                    timeout_s,
                )
            self.on_node(f"writing {path}", inline_write(path, file["after"], file["mode"]), timeout_s)
            self.say(
                f"node {self.name}: {path} written by {file['by']}"
                + (f" (the one before kept as {self.backups[path]})" if path in self.backups else "")
            )

    def forecast(self):
        """The node's own binary merges the files as its next start would: no restart into a refusal."""
        view, handler = self.seen_now(), self.knobs.gpu_handler
        self.before = (view["daemon"] or {}).get("pid")
        if view["cri_after_restart"] == "ok" and handler in view["after_restart"]:
            return
        for file in self.node.plan["files"]:
            path = shlex.quote(file["path"])
            self.on_node(
                "putting the file back",
                f"mv -f {shlex.quote(self.backups[file['path']])} {path}"
                if file["path"] in self.backups
                else f"rm -f {path}",
                self.knobs.node_read_timeout_s,
            )
        raise drain.Stalled(
            f"{view['runtime']} {view['version']}'s own merge of the files says a restart gives "
            f"{','.join(view['after_restart']) or 'nothing'} with CRI {view['cri_after_restart']} "
            f"({view.get('restart_reason') or ''}): not restarted, the files put back"
        )

    def restart(self):
        # CRI-O is restarted, never reloaded: a SIGHUP's new runtimes reach its status, not its
        # sandboxes (cri-o#10202, seen on 1.36.3: docs/cri-o.md)
        on_crio = self.node.plan["runtime"] == crio.NAME
        command = self.knobs.crio_restart if on_crio else self.knobs.containerd_restart
        self.beat = drain.heartbeats(self.api, self.name)  # Ready is proof only in a status the kubelet sent after this
        done, out = self.ran(f"the restart ({command})", command, self.knobs.restart_timeout_s, "restart_timeout_s")
        if not done and self.knobs.reach != "cluster":
            raise drain.Stalled(
                f"the restart ({command}) failed on {self.name}: {out.stderr or out.stdout or 'no words'}"
            )
        if not done:  # through the cluster, the runtime restarted is the one that carries the read Pod's answer
            self.say(
                f"node {self.name}: the restart's own answer went with the runtime that carried it; what follows "
                "proves it"
            )

    def cri(self):
        """A new daemon (the restart happened) whose CRI holds the handler."""
        handler = self.knobs.gpu_handler

        def holds():
            now = self.seen_now()
            pid = (now["daemon"] or {}).get("pid")
            return (
                pid not in (None, self.before) and now["loaded_from"] in LIVE and handler in now["loaded"],
                f"pid {pid or '-'}{' (not restarted yet)' if pid == self.before else ''}, "
                f"loaded {','.join(now['loaded']) or '-'} ({now['loaded_from']})",
            )

        drain.wait(
            f"{self.node.plan['runtime']} on {self.name} to restart and load {handler}",
            holds,
            self.knobs.restart_timeout_s,
            self.say,
        )

    def ready(self):
        """kubelet Ready, heard after the restart (``heard_since``: a status from before it names
        the old daemon's state, on 1.x too), with the handler among its Node's runtime handlers
        where the runtime reports handlers (containerd 2.x; ``api_handlers``)."""
        handler = self.knobs.gpu_handler

        def ready():
            found = self.core.read_node(self.name)
            node = plain(self.api, found)
            cond = next((c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"), {})
            handlers = api_handlers(node)
            heard = self.beat is None or drain.heard_since(self.beat, drain.heartbeats(self.api, self.name, found))
            return (
                cond.get("status") == "True" and heard and (handlers is None or handler in handlers),
                f"Ready {cond.get('status', 'unknown')} ({cond.get('message', '')})"
                f"{'' if heard else ', no heartbeat from the kubelet since the restart'}, "
                f"runtime handlers {handlers if handlers is not None else '(none reported)'}",
            )

        drain.wait(
            f"node {self.name} Ready, heard after the restart, with {handler} among its runtime handlers "
            "where it reports them",
            ready,
            self.knobs.restart_timeout_s,
            self.say,
            api_retry_s=REQUEST_DEADLINE_S,
        )

    def probe(self):
        """A probe Pod through the handler, asking a GPU where the node has one free: of the device
        plugin (``nvidia.com/gpu``), else of the DRA driver (a ResourceClaim of its DeviceClass).
        Never skipped: with no RuntimeClass for the handler, one of gpuop's own for the probe alone."""
        runtime_class, handler, driver = self.node.runtime_class, self.knobs.gpu_handler, self.knobs.gpu_driver
        if not runtime_class:
            runtime_class = probe.probe_class(self.api, handler)
            self.say(
                f"node {self.name}: no RuntimeClass maps to handler {handler}: the probe runs with "
                f"RuntimeClass {runtime_class}, made for it"
            )
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items
        gpus = min(
            1,
            free_gpus(
                plain(self.api, self.core.read_node(self.name)),
                [plain(self.api, p) for p in pods],
            ),
        )
        free = 0 if gpus else free_devices(self.name, probe.dra_objects(self.api, self.name), driver)
        device_class = probe.device_class_of(self.api, driver) if free else ""
        try:
            probe.probe(
                self.api,
                self.name,
                runtime_class,
                self.knobs.node_pod_image,
                self.namespace,
                self.knobs.restart_timeout_s,
                self.say,
                gpus,
                api_retry_s=REQUEST_DEADLINE_S,
                device_class=device_class,
            )
        finally:
            if runtime_class != self.node.runtime_class:
                probe.probe_class_gone(self.api, runtime_class)
        given = (
            ", given a GPU"
            if gpus
            else f", given a device of DRA driver {driver} (DeviceClass {device_class})"
            if device_class
            else f", asking no GPU: {free} device(s) of DRA driver {driver} free, but no DeviceClass "
            f"{driver} to claim one through"
            if free
            else ", asking no GPU (none advertised free)"
        )
        self.say(f"node {self.name}: a probe Pod of RuntimeClass {runtime_class} ran there{given}")

    def uncordon(self):
        repaired = self.node.plan["action"] == "repair"
        if not self.ours:  # someone else's cordon: theirs to lift
            self.say(f"node {self.name}: repaired; it stays cordoned: someone else cordoned it, theirs to put back")
            return
        drain.uncordon(self.core, self.name)
        self.say(
            f"node {self.name}: "
            + (
                "repaired and back in service"
                if repaired
                else "healthy, and still cordoned by an earlier gpuop run: uncordoned"
            )
        )

    def failed(self, step: str, words: str):
        """The node after a failed step: back in service where nothing on it changed and it was in
        service before; else left cordoned saying why (``gpuop.io/repair-failed``). A node an
        earlier run left failed goes back only once proven: here it stays cordoned, its mark
        updated."""
        try:
            if step not in self.UNTOUCHED or self.node.left_failed and self.ours:
                drain.mark_failed(self.core, self.name, f"{step}: {words}")
                if step in self.UNTOUCHED:
                    self.say(
                        f"node {self.name}: stays cordoned: an earlier gpuop run left it failed "
                        f"({self.node.left_failed}), and this run proved nothing"
                    )
            elif self.ours:
                drain.uncordon(self.core, self.name)
        except Exception as e:  # noqa: BLE001 (putting a node back is tried to the end; what failed is said)
            logger.error(f"{self.target.print_prefix}node {self.name}: {in_words(e, 5)}")


# A node's repair, step by step: each step's name (in the run's words and its report) and the
# method of _Steps that takes it.
STEPS = (
    ("cordon", _Steps.cordon),
    ("drain", _Steps.drain),
    ("write", _Steps.write),
    ("forecast", _Steps.forecast),
    ("restart", _Steps.restart),
    ("CRI", _Steps.cri),
    ("Ready", _Steps.ready),
    ("probe", _Steps.probe),
    ("uncordon", _Steps.uncordon),
)
PROVEN = STEPS[-3:]  # a healthy node gpuop left cordoned: Ready, probe, uncordon: proven before it is put back


def _repair(api, name: str, node: _Node, rollout: _Rollout, namespace: str, max_failures: int = 0):
    """One node through the repair's steps, each timed (``rollout.phases``: bench/repair.py reads
    them); its outcome, or its failure, in ``rollout``."""
    steps = _Steps(api, name, node, rollout, namespace)
    phases = rollout.phases.setdefault(name, {})
    healthy = node.plan["action"] == "none"  # here only for gpuop's cordon a run that stopped or died left
    for step, take in PROVEN if healthy else STEPS:
        if rollout.lock_lost:  # another run's now: nothing more changes here, the node left as it is
            rollout.outcomes[name] = f"left at {step}: the lock was lost"
            logger.error(f"{node.host.print_prefix}node {name} left before its step {step}: {rollout.lock_lost}")
            return
        started = time.monotonic()
        try:
            take(steps)
        except Exception as e:  # noqa: BLE001 (one sentence: no library's traceback reaches the run's output)
            words = str(e) if isinstance(e, drain.Stalled) else in_words(e, node.knobs.restart_timeout_s)
            rollout.failures.append(f"node {name}, step {step}: {words}")
            rollout.outcomes[name] = f"failed at {step}"
            steps.failed(step, words)
            logger.error(
                f"{node.host.print_prefix}the repair "
                + (
                    "stopped"
                    if len(rollout.failures) > max_failures
                    else f"of node {name} failed (the rollout goes on: repair_max_failures {max_failures})"
                )
                + f": {rollout.failures[-1]}"
            )
            return
        phases[step] = round(time.monotonic() - started, 2)
    rollout.outcomes[name] = "uncordoned" if healthy else "repaired"
