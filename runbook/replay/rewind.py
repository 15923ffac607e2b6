"""Rewinds: bring a moment of the incident back so that it can be observed again, for real.

A moment report (the Pending Pod, the GPU table, the stalled rollout) is captured once. When its
stamp no longer holds (report missing or edited, inputs changed, or the live state drifted from
it), the state that came after the moment is undone here and the stamp dropped, so the step's
ordinary operations replay the moment and its capture sees it live.
"""

import shlex

import yaml
from pyinfra.api import operation

from gpuop.judgment.cluster import rollout_lines
from gpuop.judgment.objects import differences
from gpuop.outputs.reports import render, stamp_holds
from runbook.replay.kube import applied, daemonset_and_pods, deleted, node_gpus
from runbook.replay.reports import moment_holds, recorded
from runbook.run import reads
from runbook.run.files import text
from runbook.run.reads import found, live_object


def _drop(stamp: str):
    reads.removed(stamp)
    return f"rm -f {shlex.quote(stamp)}"


@operation()
def before_pending_pod(
    report: str, stamp: str, inputs: dict, pod_manifest: str, nodes, context: str = "", timeout_s: int = 120
):
    """
    Rewind to before the GPU Pod was created when its Pending moment must be seen again: its
    report's stamp no longer holds, or the Pod itself is gone or must be replaced (a new Pod
    would just schedule wherever GPUs are advertised now). No node advertises GPUs afterwards,
    a bound Pod is deleted, and the stamp is dropped.

    .. code:: python

        before_pending_pod(report=".../out/unscheduled.txt", stamp=".../unscheduled.txt.stamp",
                           inputs={...}, pod_manifest=pod_yaml, nodes=lab_nodes)
    """
    want = yaml.safe_load(pod_manifest)
    name, namespace = want["metadata"]["name"], want["metadata"]["namespace"]
    have = live_object(f"pod/{name}", namespace, context)
    if moment_holds(report, stamp, inputs) and have and not differences(want, have):
        return
    for node in nodes:
        yield from node_gpus._inner(node=node, count=None, context=context)
    if have and have["spec"].get("nodeName"):
        yield deleted(f"pod/{name}", namespace, context, timeout_s)
    yield _drop(stamp)


@operation()
def before_gpus_advertised(report: str, stamp: str, inputs: dict, gpu_node: str, nodes, context: str = ""):
    """
    Rewind to before step 6 when the GPU table must be captured again: only ``gpu_node`` will
    advertise GPUs, so the time-sliced node goes back to none.

    .. code:: python

        before_gpus_advertised(report=".../out/node-gpu.txt", stamp=..., inputs={...},
                               gpu_node="lab-node-0", nodes=lab_nodes)
    """
    if moment_holds(report, stamp, inputs):
        return
    for node in nodes:
        if node != gpu_node:
            yield from node_gpus._inner(node=node, count=None, context=context)
    yield _drop(stamp)


@operation()
def before_toolkit_upgrade(
    report: str, stamp: str, inputs: dict, path: str, initial: str, upgrade: str, context: str = ""
):
    """
    Rewind the toolkit DaemonSet to its initial spec when the stalled rollout must be observed
    again: the report or its stamp changed, the live spec is not the upgrade, or the live rollout
    is no longer the one captured (a Pod deleted, a rollback).

    + path: the DaemonSet manifest file, which then holds the initial spec
    + initial: manifest text of the spec before the upgrade
    + upgrade: manifest text of the upgrade

    .. code:: python

        before_toolkit_upgrade(report=".../out/rollout.txt", stamp=..., inputs={...},
                               path=".../k8s/toolkit-ds.yaml", initial=ds_v1162, upgrade=ds_v1170)
    """
    report_text, stamp_text = recorded(report, stamp)
    want = yaml.safe_load(upgrade)
    ds, pods = daemonset_and_pods(want["metadata"]["name"], want["metadata"]["namespace"], context)
    if (
        stamp_holds(stamp_text, report_text, inputs)
        and ds is not None
        and not differences(want, ds)
        and stamp_holds(stamp_text, render(rollout_lines(ds, pods)), inputs)
    ):
        return  # the live DaemonSet runs the upgrade, and its rollout reads as the one stamped
    yield from text._inner(path=path, content=initial, backup=False)
    yield from applied(path, context, live_objects=ds is not None)
    yield _drop(stamp)


@operation(is_idempotent=False)
def reset(files: list, namespaces: list, cluster_objects: list, nodes, context: str = "", timeout_s: int = 120):
    """
    Reset the lab to before step 1: remove the files the playbook wrote, delete its namespaces
    and cluster-scoped objects (waiting until they are gone), and withdraw every lab node's GPU
    advertisement. Backups are kept.

    + files: the playbook's own files on the target
    + namespaces: namespaces it owns
    + cluster_objects: cluster-scoped objects it owns, as ``kind/name``
    + nodes: the lab nodes
    + timeout_s: how long objects may take to be gone

    .. code:: python

        reset(files=layout.owned_files(...), namespaces=["gpu-lab", "gpu-operator"],
              cluster_objects=["runtimeclass/nvidia"], nodes=lab_nodes)
    """
    present = reads.files(files)
    if present:
        reads.removed(*present)
        yield "rm -f " + " ".join(shlex.quote(p) for p in sorted(present))
    live_ns = found([f"namespace/{n}" for n in namespaces], context=context)
    if live_ns:
        yield deleted(
            " ".join(f"namespace/{n['metadata']['name']}" for n in live_ns), context=context, timeout_s=timeout_s
        )
    for obj in cluster_objects:
        if live_object(obj, context=context):
            yield deleted(obj, context=context, timeout_s=timeout_s)
    for node in nodes:
        yield from node_gpus._inner(node=node, count=None, context=context)
