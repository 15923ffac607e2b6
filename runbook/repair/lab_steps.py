"""The repair's steps, each a named deploy (see fix.py for the order): from the incident to a
healthy GPU node, decided from live facts, proven by the audit."""

import tomli_w
from pyinfra.api import deploy

from gpuop.layout import Layout
from runbook.replay import containerd as lab_containerd
from runbook.replay import kube, lab_host, manifests
from runbook.replay.incident import gpu_objects
from runbook.replay.lab_host import lab_daemon
from runbook.run import checks
from runbook.run.files import text

NODE_RUNTIMES = ("runc", "nvidia")  # what a healthy GPU node's containerd holds


@deploy("Preflight: what the repair needs")
def preflight(lab):
    checks.lab_containerd_present(name="the lab's own containerd is here to restart", binary=lab.containerd_binary)
    checks.memory_fits(
        name="every lab node can take the repaired toolkit's memory request",
        knob="toolkit_memory_fix",
        memory=lab.toolkit_memory_fix,
        nodes=lab.lab_nodes,
        context=lab.kube_context,
    )


@deploy("Repair 1: a drop-in containerd keeps whole, loaded by one restart")
def runtime(lab, at: Layout):
    daemon = lab_daemon(lab, at)
    main = lab_host.lab_config(lab, at)
    text(name="config.toml", path=at.config_toml, content=tomli_w.dumps(main))
    lab_containerd.surviving_dropin(
        name="conf.d/99-nvidia.toml, as this containerd's merge keeps it",
        path=at.nvidia_dropin,
        daemon=daemon,
        main_doc=main,
        runtimes=NODE_RUNTIMES,
        nvidia_ctk=lab.nvidia_ctk_binary,
        scratch=at.nvidia_ctk_scratch,
    )
    lab_containerd.restarted_into(
        name="The lab containerd holds runc and nvidia, restarted only if the forecast is ok",
        daemon=daemon,
        runtimes=NODE_RUNTIMES,
        moment=at.stamp("restart"),
        timeout_s=lab.wait_timeout_s,
    )


@deploy("Repair 2: the GPU Pod runs with RuntimeClass nvidia, its handler loaded")
def gpu_pod(lab, at: Layout):
    ctx = lab.kube_context
    kube.namespace(
        name=f"Namespace {manifests.GPU_NAMESPACE}",
        namespace_name=manifests.GPU_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
    gpu_objects(lab, at)
    kube.node_gpus(
        name=f"{lab.gpu_node} advertises {lab.gpu_count} GPUs", node=lab.gpu_node, count=lab.gpu_count, context=ctx
    )
    kube.pod_running(
        name="The GPU Pod runs",
        pod=manifests.GPU_POD,
        namespace=manifests.GPU_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
    if lab.kubelet_node:  # the API's view of loaded catches up at kubelet's next status update
        kube.node_reports_handler(
            name=f"{lab.kubelet_node}'s kubelet reports handler {manifests.HANDLER}",
            node=lab.kubelet_node,
            handler=manifests.HANDLER,
            moment=at.stamp("restart"),
            context=ctx,
            timeout_s=lab.wait_timeout_s,
        )


@deploy("Repair 3: the toolkit upgrade, asking memory every node has")
def toolkit(lab, at: Layout):
    ctx = lab.kube_context
    kube.namespace(
        name=f"Namespace {manifests.OPERATOR_NAMESPACE}",
        namespace_name=manifests.OPERATOR_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
    kube.manifest(
        name=f"toolkit-ds.yaml: the upgrade asking {lab.toolkit_memory_fix}",
        path=at.manifest("toolkit-ds.yaml"),
        context=ctx,
        content=manifests.toolkit(lab, lab.toolkit_version_upgrade, lab.toolkit_memory_fix),
    )
    kube.daemonset_ready(
        name="Every node runs a Ready upgraded toolkit Pod",
        daemonset=manifests.TOOLKIT,
        namespace=manifests.OPERATOR_NAMESPACE,
        context=ctx,
        timeout_s=lab.wait_timeout_s,
    )
