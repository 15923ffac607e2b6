"""One node's repair, step by step (``repair``: cordon, drain, write, forecast, restart, CRI,
Ready, probe, uncordon), each step a method of ``Steps`` that raises ``Stalled`` with what was
seen where it does not happen; and what a rollout records of its nodes (``Rollout``,
``RolloutNode``), which ``runbook.repair.rollout`` plans and runs."""

import os
import posixpath
import shlex
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime

from kubernetes import client
from pyinfra import logger
from pyinfra.api import StringCommand

from gpuop.judgment import crio
from gpuop.judgment.view import LIVE, api_handlers, node_view
from gpuop.layout import node_backup_of
from gpuop.reach.kubeapi import in_words, plain
from gpuop.reach.node_read import node_read
from gpuop.repair import drain, lease, probe
from gpuop.repair.pods import free_devices, free_gpus
from runbook.reach.node import NodeRuntime
from runbook.run.files import inline_write

REQUEST_DEADLINE_S = 20  # each request of the rollout to the API server (a cordon, an eviction, a read)


@dataclass
class RolloutNode:
    """A node to put through the rollout: its pyinfra host, its plan and its own knobs."""

    host: object
    plan: dict
    knobs: object
    runtime_class: str
    left_cordoned: bool  # gpuop's cordon found on it: a run that stopped or died left it, gpuop's to put back
    left_failed: str  # the failure an earlier run marked it with: it goes back into service only once proven


@dataclass
class Rollout:
    plans: dict = field(default_factory=dict)  # node name -> its plan, every node read
    readers: dict = field(default_factory=dict)  # node name -> (its Host, its knobs), to read it again after
    nodes: dict = field(default_factory=dict)  # node name -> RolloutNode, to put through the rollout
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


class Steps:
    """One node's repair, step by step (see ``rolled_out``): each method is one step, raising
    ``Stalled`` with what was seen where it does not happen."""

    UNTOUCHED = ("cordon", "drain", "forecast")  # a failure there leaves the node as it was: back in service

    def __init__(self, api, name: str, node: RolloutNode, rollout: Rollout, namespace: str):
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
# method of Steps that takes it.
STEPS = (
    ("cordon", Steps.cordon),
    ("drain", Steps.drain),
    ("write", Steps.write),
    ("forecast", Steps.forecast),
    ("restart", Steps.restart),
    ("CRI", Steps.cri),
    ("Ready", Steps.ready),
    ("probe", Steps.probe),
    ("uncordon", Steps.uncordon),
)
PROVEN = STEPS[-3:]  # a healthy node gpuop left cordoned: Ready, probe, uncordon: proven before it is put back


def repair(api, name: str, node: RolloutNode, rollout: Rollout, namespace: str, max_failures: int = 0):
    """One node through the repair's steps, each timed (``rollout.phases``: bench/repair.py reads
    them); its outcome, or its failure, in ``rollout``."""
    steps = Steps(api, name, node, rollout, namespace)
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
