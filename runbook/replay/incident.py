"""The incident's eight steps, each a named deploy (see deploy.py for the runbook order), with
the replay's reset before them and the kubelet node's reboot after.

    containerd_config(lab, at); nvidia_dropin(lab, at); ...; toolkit_rollout(lab, at)
"""

import os
import shlex

import tomli_w
import yaml
from pyinfra import host
from pyinfra.api import deploy

from gpuop.judgment import configs
from gpuop.judgment.cluster import (
    SANDBOX_FAILED,
    allocatable_count,
    node_gpu_lines,
    reboot_lines,
    rollout_lines,
    sandbox_failure,
    sandbox_lines,
)
from gpuop.judgment.objects import of_kind
from gpuop.judgment.scheduling import pod_scheduled
from gpuop.judgment.slots import replicas_of, sharing_config, slot_lines
from gpuop.layout import Layout
from runbook import PROJECT
from runbook.replay import containerd as lab_containerd
from runbook.replay import kube, lab_host, manifests, reports, rewind
from runbook.replay.kube import daemonset_and_pods
from runbook.replay.lab_host import lab_daemon
from runbook.replay.manifests import (
    GPU_NAMESPACE,
    GPU_POD,
    KUBELET_NODE_REPORTS,
    MANIFESTS,
    OPERATOR_NAMESPACE,
    REPORTS,
    RUNTIME_CLASS,
    TIME_SLICING,
    TOOLKIT,
    manifest,
)
from runbook.run import reads
from runbook.run.files import text
from runbook.run.reads import found, live_object
from runbook.run.summary import at_end


def gpu_objects(lab, at: Layout):
    """The RuntimeClass nvidia and the GPU Pod that names it, applied where they differ."""
    for file_name, content in (("runtimeclass.yaml", manifests.runtime_class()), ("gpu-pod.yaml", manifests.gpu_pod())):
        kube.manifest(name=file_name, path=at.manifest(file_name), content=content, context=lab.kube_context)


@deploy("Replay: reset the lab to before step 1")
def reset_lab(lab, at: Layout):
    rewind.reset(
        name="Remove the incident's files, objects and GPU advertisements",
        files=at.owned_files(MANIFESTS, REPORTS + KUBELET_NODE_REPORTS),
        namespaces=[GPU_NAMESPACE, OPERATOR_NAMESPACE],
        cluster_objects=[f"runtimeclass/{RUNTIME_CLASS}"],
        nodes=lab.lab_nodes,
        context=lab.kube_context,
        timeout_s=lab.wait_timeout_s,
    )
    daemon = lab_daemon(lab, at)
    if daemon:
        lab_containerd.stopped(name="Stop the lab containerd", daemon=daemon, timeout_s=lab.wait_timeout_s)


@deploy("Step 1: containerd main config")
def containerd_config(lab, at: Layout):
    text(name="config.toml", path=at.config_toml, content=tomli_w.dumps(lab_host.lab_config(lab, at)))


@deploy("Step 2: the toolkit's nvidia drop-in, and nobody restarts containerd")
def nvidia_dropin(lab, at: Layout):
    daemon = lab_daemon(lab, at)
    if daemon:
        lab_containerd.incident_daemon(
            name="The lab containerd runs, started before the drop-in existed",
            daemon=daemon,
            dropin_glob=at.dropin_glob,
            aside=at.dropins_aside,
            timeout_s=lab.wait_timeout_s,
        )
    systemd = configs.systemd_cgroup(lab_host.lab_config(lab, at))  # the toolkit follows runc's driver
    text(
        name="conf.d/99-nvidia.toml",
        path=at.nvidia_dropin,
        content=tomli_w.dumps(configs.nvidia_dropin(systemd=systemd)),
    )


@deploy("Step 3: what merges, what is loaded, and what a restart would load")
def merge_report(lab, at: Layout):
    reports.containerd(
        name="merge.txt and restart.txt",
        merge=at.report("merge.txt"),
        restart=at.report("restart.txt"),
        config=at.config_toml,
        observed=lab.loaded_runtimes_observed,
        daemon=lab_daemon(lab, at),
    )


@deploy("Step 4: checks of the config: what a restart loads, and what is loaded")
def check_script(lab, at: Layout):
    with open(os.path.join(PROJECT, "files", "check-runtime.sh")) as f:
        text(name="check-runtime.sh", path=at.check_script, content=f.read(), mode="755")
    text(
        name="check-loaded.sh",
        path=at.check_loaded_script,
        mode="755",
        content=manifest(
            "check-loaded.sh",
            endpoint=shlex.quote(f"unix://{at.containerd_socket}"),
            crictl=shlex.quote(lab.crictl_binary),
        ),
    )


@deploy("Step 5: RuntimeClass and a GPU Pod that cannot schedule")
def runtime_class_and_pod(lab, at: Layout):
    ctx, timeout = lab.kube_context, lab.wait_timeout_s
    pod = manifests.gpu_pod()
    inputs = {"nodes": lab.lab_nodes, "pod": pod}
    report, stamp = at.report("unscheduled.txt"), at.stamp("unscheduled.txt")

    if lab.kubelet_node:  # its kubelet registers once the lab containerd (step 2) answers
        kube.node_takes_pods(
            name=f"The kubelet node {lab.kubelet_node} takes Pods",
            node=lab.kubelet_node,
            context=ctx,
            timeout_s=timeout,
        )
    rewind.before_pending_pod(
        name="Rewind to before the GPU Pod, if its moment must be seen again",
        report=report,
        stamp=stamp,
        inputs=inputs,
        pod_manifest=pod,
        nodes=lab.lab_nodes,
        context=ctx,
        timeout_s=timeout,
    )
    kube.namespace(name=f"Namespace {GPU_NAMESPACE}", namespace_name=GPU_NAMESPACE, context=ctx, timeout_s=timeout)
    gpu_objects(lab, at)
    kube.pod_scheduling_decided(
        name="Scheduler's decision on the GPU Pod", pod=GPU_POD, namespace=GPU_NAMESPACE, context=ctx, timeout_s=timeout
    )

    def unscheduled():
        cond = pod_scheduled(live_object(f"pod/{GPU_POD}", GPU_NAMESPACE, ctx) or {}) or {}
        if cond.get("status") != "False":
            raise reports.Unobservable(
                f"Pod {GPU_NAMESPACE}/{GPU_POD} is not Pending on scheduling "
                f"(PodScheduled: {cond.get('status', 'unset')})"
            )
        return [cond["reason"], cond["message"]]

    reports.moment(name="unscheduled.txt", path=report, stamp=stamp, capture=unscheduled, inputs=inputs)


@deploy("Step 6: advertise GPUs like a device plugin")
def advertise_gpus(lab, at: Layout):
    ctx = lab.kube_context
    inputs = {"nodes": lab.lab_nodes, "gpu_node": lab.gpu_node, "gpu_count": lab.gpu_count}
    report, stamp = at.report("node-gpu.txt"), at.stamp("node-gpu.txt")

    rewind.before_gpus_advertised(
        name="Rewind to before the advertisement, if its table must be seen again",
        report=report,
        stamp=stamp,
        inputs=inputs,
        gpu_node=lab.gpu_node,
        nodes=lab.lab_nodes,
        context=ctx,
    )
    kube.node_gpus(
        name=f"{lab.gpu_node} advertises {lab.gpu_count} GPUs", node=lab.gpu_node, count=lab.gpu_count, context=ctx
    )
    if lab.kubelet_node:
        sandbox_fails(lab, at)
    else:  # a kwok node runs whatever binds to it
        kube.pod_running(
            name="The GPU Pod binds and runs",
            pod=GPU_POD,
            namespace=GPU_NAMESPACE,
            context=ctx,
            timeout_s=lab.wait_timeout_s,
        )
    reports.moment(
        name="node-gpu.txt",
        path=report,
        stamp=stamp,
        inputs=inputs,
        capture=lambda: node_gpu_lines(found("nodes", context=ctx), lab.lab_nodes),
    )


def sandbox_fails(lab, at: Layout):
    """On the kubelet node the GPU Pod binds and its sandbox cannot start: sandbox.txt holds the
    kubelet's live event, captured once (a replay captures it again)."""
    ctx = lab.kube_context
    kube.pod_sandbox_failed(
        name="The GPU Pod binds, and the kubelet cannot create its sandbox",
        pod=GPU_POD,
        namespace=GPU_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
    report, stamp = at.report("sandbox.txt"), at.stamp("sandbox.txt")

    def failed():
        live, events = kube.pod_and_events(GPU_POD, GPU_NAMESPACE, ctx)
        event = sandbox_failure(events, live) if live else None
        if event is None:
            raise reports.Unobservable(f"Pod {GPU_NAMESPACE}/{GPU_POD} has no {SANDBOX_FAILED} event")
        return sandbox_lines(live, event, manifests.HANDLER)

    reports.moment(name="sandbox.txt", path=report, stamp=stamp, capture=failed, inputs={"node": lab.kubelet_node})


@deploy("Step 7: time-slicing, and what a slot really gets")
def time_slicing(lab, at: Layout):
    ctx = lab.kube_context
    sharing = yaml.safe_dump(sharing_config(lab.replicas), sort_keys=False).rstrip("\n")
    config_map = manifest("time-slicing.yaml", configmap=TIME_SLICING, namespace=OPERATOR_NAMESPACE, sharing=sharing)

    kube.namespace(
        name=f"Namespace {OPERATOR_NAMESPACE}",
        namespace_name=OPERATOR_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
    kube.manifest(name="time-slicing.yaml", path=at.manifest("time-slicing.yaml"), content=config_map, context=ctx)
    kube.node_gpus(
        name=f"{lab.timeslice_node} advertises its time-sliced GPUs",
        node=lab.timeslice_node,
        count=lab.physical_gpus * lab.replicas,
        context=ctx,
    )

    def slots():
        objects = found(
            (f"configmap/{TIME_SLICING}", f"node/{lab.timeslice_node}"), namespace=OPERATOR_NAMESPACE, context=ctx
        )
        cm, node = of_kind(objects, "ConfigMap"), of_kind(objects, "Node")
        if not cm or not node:
            raise reports.Unobservable(f"ConfigMap {TIME_SLICING} or node {lab.timeslice_node} absent")
        return slot_lines(
            lab.physical_gpus, replicas_of(cm[0]["data"]["any"]), allocatable_count(node[0]), lab.vram_per_gpu_gib
        )

    reports.live(name="slots.txt", path=at.report("slots.txt"), capture=slots)


@deploy("Step 8: a toolkit upgrade that stalls on memory")
def toolkit_rollout(lab, at: Layout):
    ctx, timeout = lab.kube_context, lab.wait_timeout_s
    initial = manifests.toolkit(lab, lab.toolkit_version_initial, lab.toolkit_memory_initial)
    upgrade = manifests.toolkit(lab, lab.toolkit_version_upgrade, lab.toolkit_memory_upgrade)
    inputs = {"nodes": lab.lab_nodes, "initial": initial, "upgrade": upgrade}
    path = at.manifest("toolkit-ds.yaml")
    report, stamp = at.report("rollout.txt"), at.stamp("rollout.txt")

    rewound = rewind.before_toolkit_upgrade(
        name="Roll out the initial toolkit, if the stall must be seen again",
        report=report,
        stamp=stamp,
        inputs=inputs,
        path=path,
        initial=initial,
        upgrade=upgrade,
        context=ctx,
    )
    kube.daemonset_ready(
        name="Every node runs a Ready initial toolkit Pod",
        daemonset=TOOLKIT,
        namespace=OPERATOR_NAMESPACE,
        context=ctx,
        timeout_s=timeout,
        _if=rewound.did_change,
    )
    kube.manifest(name="toolkit-ds.yaml: the upgrade", path=path, content=upgrade, context=ctx)
    kube.daemonset_settled(
        name="The rollout goes as far as it can",
        daemonset=TOOLKIT,
        namespace=OPERATOR_NAMESPACE,
        context=ctx,
        timeout_s=timeout,
    )

    def rollout():
        ds, pods = daemonset_and_pods(TOOLKIT, OPERATOR_NAMESPACE, ctx)
        if ds is None:
            raise reports.Unobservable(f"DaemonSet {OPERATOR_NAMESPACE}/{TOOLKIT} absent")
        return rollout_lines(ds, pods)

    reports.moment(name="rollout.txt", path=report, stamp=stamp, capture=rollout, inputs=inputs)


@deploy("After the incident: a reboot restarts the node's containerd")
def reboot(lab, at: Layout):
    ctx, daemon, moment = lab.kube_context, lab_daemon(lab, at), at.stamp("reboot.txt")
    lab_containerd.rebooted(
        name="The node's containerd restarts, as a reboot restarts it",
        daemon=daemon,
        moment=moment,
        timeout_s=lab.wait_timeout_s,
    )
    kube.node_reports_restart(
        name=f"{lab.kubelet_node}'s kubelet reports the restarted runtime",
        node=lab.kubelet_node,
        moment=moment,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )

    def after():
        when, forecast = kube.moment_of(moment), reads.containerd()["restart"]  # a restart changes no file
        node = live_object(f"node/{lab.kubelet_node}", context=ctx, in_wait=True)
        if when is None or node is None or forecast is None:
            raise reports.Unobservable(f"no restart recorded in {moment}, no node {lab.kubelet_node}, or no forecast")
        return reboot_lines(forecast["cri_ok"], node, when)

    reports.live(name="reboot.txt", path=at.report("reboot.txt"), capture=after)


def summary(lab, at: Layout):
    """After pyinfra's results: the incident's key lines on this host, and where its reports are."""
    at_end(host, os.path.dirname(at.report(REPORTS[0])), REPORTS)
