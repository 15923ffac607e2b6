"""The repair of real nodes (only ``pyinfra nodes.py fix.py`` imports this, and the kubernetes
client with it): each node planned from the audit's own judgment of it
(``gpuop.repair.plan``), every node read at once; then one rollout, from this machine, in the
order of the nodes' names, at most ``repair_max_unavailable`` at a time: taken out of service,
fixed, restarted, proven and put back, the rollout stopped once more than
``repair_max_failures`` nodes fail. A healthy node is never cordoned; a repaired fleet yields no
command.
"""

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
from gpuop.judgment.view import node_view
from gpuop.outputs.tables import fleet_table
from gpuop.outputs.textfile import repair_registry, write_reports
from gpuop.reach.kubeapi import api_client, in_words, read_cluster
from gpuop.reach.node_read import node_read
from gpuop.repair import drain, lease, probe
from gpuop.repair.plan import plan_lines, plan_node
from runbook.audit.node_audit import cluster_objects
from runbook.reach.node import NodeRuntime, ToolkitDropin
from runbook.repair.node_repair import REQUEST_DEADLINE_S, Rollout, RolloutNode, repair
from runbook.run.poll import failure
from runbook.run.state import run_of


def rollout_of(state) -> Rollout:
    """This run's rollout (``runbook.run.state``), made at the first node's plan."""
    run = run_of(state)
    if run.rollout is None:
        run.rollout = Rollout()
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
    plan = _with_toolkit(plan, read, view, judged["gaps"], objects, knobs)
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
        rollout_of(host.state).nodes[name] = RolloutNode(
            this, plan, knobs, _gpu_class(objects, knobs.gpu_handler), left, left_failed
        )


def _with_toolkit(plan: dict, read: dict, view: dict, gaps: list, objects: list, knobs) -> dict:
    """The plan made again with the drop-in the node's own nvidia-ctk would write (``ToolkitDropin``,
    one more command), where it writes one (CRI-O, containerd 2.x not regenerated); else as it is."""
    on_crio = view["runtime"] == crio.NAME
    if not plan["files"] or not (on_crio or release(view["version"]) >= (2,) and not view["regenerated"]):
        return plan
    config = next(d["config"] for d in read["crios" if on_crio else "containerds"] if d["serves"])
    toolkit = host.get_fact(
        ToolkitDropin,
        config=config,
        dropin=plan["files"][-1]["path"],
        runtime="crio" if on_crio else "containerd",
        _timeout=knobs.node_read_timeout_s,
    )
    return plan_node(plan["node"], read, view, gaps, objects, knobs.gpu_handler, toolkit) if toolkit else plan


def outcome(rollout: Rollout, name: str) -> str:
    """What the run did to node ``name``, in one word or a few."""
    plan = rollout.plans[name]
    if name in rollout.outcomes:
        return rollout.outcomes[name]
    if plan["action"] == "blocked":
        return "not repaired"
    if name in rollout.nodes:
        return "untouched (the rollout stopped)" if rollout.stopped else "planned"
    return "nothing to do"


def audited_after(rollout: Rollout, kubeconfig: str, context: str) -> dict:
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


def _reported(rollout: Rollout, report: str, textfile: str, after: dict | None = None):
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
        keeper = _locked(api, rollout, namespace, lock_s)
        try:
            _rolled(api, rollout, namespace, max_unavailable, max_failures)
        finally:
            _unlocked(api, rollout, namespace, lock_s, keeper)
        return _ended(rollout, host, kubeconfig, context, report, textfile)

    yield FunctionCommand(roll, (), {})


def _locked(api, rollout: Rollout, namespace: str, lock_s: int):
    """The repair's Lease taken (or taken over from a run that stopped) and kept by a timer of its
    own, the probe Pods a killed run left deleted under it: the timer's greenlet; None where the
    lock was not had (``rollout.stopped`` says why: the rollout then stops before its first node)."""
    try:
        taken = lease.lock(api, namespace, rollout.holder, lock_s)
        if taken:
            logger.info(f"repair: the Lease {namespace}/{lease.LEASE} taken over from a run that stopped: {taken}")
        keeper = gevent.spawn(_lock_kept, api, rollout, namespace, lock_s)
    except Exception as e:  # noqa: BLE001 (the lock not had stops the rollout, said in one sentence)
        rollout.stopped = f"the lock: {e if isinstance(e, drain.Stalled) else in_words(e, 20)}"
        return None
    try:  # under the lock, every probe Pod is one a killed run left
        left = probe.probes_left(api, namespace)
        if left:
            logger.info(f"repair: deleted the probe Pod(s) a killed run left: {', '.join(left)}")
    except Exception as e:  # noqa: BLE001 (its deadline ends such a Pod anyway)
        logger.warning(f"repair: the probe Pods a killed run may have left were not read: {in_words(e, 20)}")
    return keeper


def _unlocked(api, rollout: Rollout, namespace: str, lock_s: int, keeper) -> None:
    """The Lease's timer stopped and the Lease given back, where it is still this run's."""
    if keeper is not None:
        keeper.kill()
    if rollout.stopped.startswith("the lock"):
        return
    try:
        lease.unlock(api, namespace, rollout.holder)
    except Exception as e:  # noqa: BLE001 (one sentence: the client's own error handling can fail too)
        logger.warning(
            f"repair: the Lease was not given back ({in_words(e, REQUEST_DEADLINE_S)}); "
            f"it lapses {lock_s}s after its last renewal"
        )


def _ended(rollout: Rollout, host, kubeconfig: str, context: str, report: str, textfile: str) -> bool:
    """Each node's outcome said, the fleet audited again and reported; whether the rollout ended
    with every node repaired and no gap left."""
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


def _lock_kept(api, rollout: Rollout, namespace: str, lock_s: int):
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


def _rolled(api, rollout: Rollout, namespace: str, max_unavailable: int, max_failures: int):
    """Every planned node through ``node_repair.repair``, in name order, ``max_unavailable`` at once (greenlets:
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
        pool.spawn(repair, api, name, rollout.nodes[name], rollout, namespace, max_failures)
    pool.join()
    stops()
