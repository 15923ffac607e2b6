"""The lab host as a target: its knobs, where its files live, its containerd, and what its runs read.

lab, at = lab_host.checked(host)   # first thing of deploy.py, fix.py and audit.py on a lab host
"""

import posixpath

from pyinfra import logger
from pyinfra.api.exceptions import DeployError

from gpuop.judgment import configs
from gpuop.knobs import KnobError, parse_knobs, renamed
from gpuop.layout import Layout
from runbook.replay.labdaemon import LabDaemon
from runbook.replay.manifests import KUBELET_NODE_REPORTS, MANIFESTS, REPORTS
from runbook.run import reads


def lab_daemon(lab, at: Layout):
    """The lab node's own containerd daemon, or None where the knobs say the lab runs none.

    lab_daemon(lab, Layout("/root/gpuop")).socket -> "/root/gpuop/run/containerd/containerd.sock"
    """
    if not lab.containerd_binary:
        return None
    return LabDaemon(
        binary=lab.containerd_binary,
        crictl=lab.crictl_binary,
        config=at.config_toml,
        socket=at.containerd_socket,
        state=at.containerd_state,
        root=at.containerd_root,
        pidfile=at.containerd_pid,
        log=at.containerd_log,
        namespace=at.kubelet_node_namespace if lab.kubelet_node else "",
    )


def lab_config(lab, at: Layout) -> dict:
    """The lab node's main config.toml: the seed's, and on the kubelet node (``kubelet_node``) with what
    its kubelet's Pods need on this kind of machine (``gpuop.judgment.configs.kubelet_node_cri``).

        lab_config(lab, Layout("/root/gpuop"))["imports"] -> ["/root/gpuop/etc/containerd/conf.d/*.toml"]
    """
    node_cri = configs.kubelet_node_cri(*at.kubelet_node_cni) if lab.kubelet_node else None
    return configs.seed_config(at.dropin_glob, node_cri=node_cri)


def checked(host):
    """
    The host's knobs, parsed and checked, and its layout; a bad knob stops the run before
    anything is changed, naming the host, the key, the value and what was expected. What the
    run reads of the host is declared here, to be read in one round trip (see runbook.run.reads).

    .. code:: python

        lab, at = checked(host)   # lab.replicas -> 5, at.config_toml -> "/root/gpuop/etc/..."
    """
    try:
        lab = parse_knobs(host.data)
    except KnobError as bad:
        raise DeployError(f"{host.name}: {bad} (nothing was changed)") from None
    for notice in renamed(host.data):
        logger.warning(f"{host.print_prefix}{notice}")
    at = Layout(lab.gpuop_root)
    lab_files = (
        *at.owned_files(MANIFESTS, REPORTS + KUBELET_NODE_REPORTS),
        at.report("audit.json"),
        posixpath.join(posixpath.dirname(at.dropin_glob), "*"),  # the drop-ins and what else conf.d holds
        posixpath.join(at.dropins_aside, "*"),
    )
    reads.declare(host, files=lab_files, context=lab.kube_context, daemon=lab_daemon(lab, at))
    return lab, at
