"""A real kubelet on a simulated node: standalone, or registered in the lab cluster with what its
containerd needs to run Pods here (a stand-in Pod network, images imported, not pulled)."""

import json
import os
import re

import yaml

from lab import labcluster
from tests.helpers import ROOT as HERE  # the project
from tests.helpers.fleetobjects import MARK
from tests.helpers.kube import LAB
from tests.helpers.labcontainerd import binary, built
from tests.helpers.layouts import write_file
from tests.helpers.proc import run
from tests.helpers.ssh import free_port

CLUSTER_DIR = os.path.expanduser(f"~/.kwok/clusters/{LAB}")  # the lab's CA and admin kubeconfig


READ_IMAGE = (
    "docker.io/library/busybox:1.37"  # the cluster reach's default image (node_pod_image), as the lab imports it
)


def host_ip() -> str:
    """This machine's own address, where a registered kubelet is reached (kubelet refuses a
    loopback node IP); a UDP socket's connect sends nothing."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))
        return s.getsockname()[0]


def kubelet(dir_: str, endpoint: str, layout: str = "yaml", register: str = "") -> list:
    """A real kubelet on ``endpoint``, standalone (no API server: it only talks to its runtime),
    or, with ``register``, registering node ``register`` in the lab cluster at this machine's
    address (its own port: the API server reaches it there for a Pod's log), labelled and tainted as the
    fleet's; its configuration laid out as ``layout`` says: ``yaml``, one --config file that
    names the endpoint; ``eks``, as EKS AL2023's nodeadm writes it, a JSON --config without it and the
    endpoint in a JSON drop-in of --config-dir; ``rke2``, as RKE2 starts it, only a --config-dir
    whose YAML drop-in holds everything. What it writes outside its root is the node's own: the
    sysctls it sets (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops are not namespaced)
    land in files bound over them, and /var/log is an overlay like /var/lib."""
    if register:
        config = labcluster.kubelet_config(
            endpoint, free_port(), f"{CLUSTER_DIR}/pki/ca.crt", **labcluster.KUBELET_NODE
        )
    else:
        config = labcluster.kubelet_config(endpoint, free_port())
    head = {k: config[k] for k in ("apiVersion", "kind")}
    if layout == "yaml":
        files, flags = {"kubelet.yaml": yaml.safe_dump(config)}, f"--config {dir_}/kubelet.yaml"
    elif layout == "eks":
        rest = {k: v for k, v in config.items() if k != "containerRuntimeEndpoint"}
        # kubelet defaults what a drop-in leaves out before it merges (enforceNodeAllocatable
        # "pods", which needs QoS cgroups): the drop-in says "none" again.
        dropin = {
            **head,
            "containerRuntimeEndpoint": endpoint,
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": ["none"],
        }
        files = {"config.json": json.dumps(rest), "config.json.d/00-nodeadm.conf": json.dumps(dropin, indent=2)}
        flags = f"--config {dir_}/config.json --config-dir {dir_}/config.json.d"
    elif layout == "rke2":
        files = {"kubelet.conf.d/00-rke2-defaults.conf": yaml.safe_dump(config)}
        flags = f"--config-dir={dir_}/kubelet.conf.d"
    else:
        raise ValueError(f"kubelet layout {layout}: expected yaml, eks or rke2")
    masks = [
        f"cat /proc/sys/{f} >{dir_}/sysctl-{f.replace('/', '.')}; "
        f"mount --bind {dir_}/sysctl-{f.replace('/', '.')} /proc/sys/{f}"
        for f in ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
    ]
    writes = [
        line
        for name, text in files.items()
        for line in (f"mkdir -p {os.path.dirname(f'{dir_}/{name}')}", write_file(f"{dir_}/{name}", text + "\n"))
    ]
    if register:
        flags += (
            f" --kubeconfig {CLUSTER_DIR}/kubeconfig.yaml --hostname-override {register} --node-ip {host_ip()}"
            f" --node-labels {MARK}=true --register-with-taints {MARK}=true:NoSchedule"
        )
    return [
        *masks,
        *writes,
        f"mkdir -p {dir_}/varlog/upper {dir_}/varlog/work",
        f"mount -t overlay overlay -o lowerdir=/var/log,upperdir={dir_}/varlog/upper,workdir={dir_}/varlog/work "
        "/var/log",
        f"setsid {built('kubelet', 'kubelet')} {flags} --root-dir /var/lib/kubelet "
        f"</dev/null >{dir_}/kubelet.log 2>&1 &",
    ]


def pod_network(node) -> str:
    """The stand-in Pod network in the node's directory (lab/standin/cni, and Debian's loopback
    plugin): its folder, whose bin/ and net.d/ a runtime's CNI settings name."""
    cni = os.path.join(node.dir, "cni")
    os.makedirs(os.path.join(cni, "bin"), exist_ok=True)
    os.makedirs(os.path.join(cni, "net.d"), exist_ok=True)
    with open(os.path.join(HERE, "lab/standin/cni"), "rb") as f, open(os.path.join(cni, "bin/gpuop-lab"), "wb") as out:
        out.write(f.read())
    os.chmod(os.path.join(cni, "bin/gpuop-lab"), 0o755)
    if not os.path.lexists(os.path.join(cni, "bin/loopback")):
        os.symlink("/usr/lib/cni/loopback", os.path.join(cni, "bin/loopback"))
    with open(os.path.join(cni, "net.d/10-gpuop-lab.conflist"), "w") as f:
        json.dump(
            {"cniVersion": "1.0.0", "name": "gpuop-lab", "plugins": [{"type": "gpuop-lab", "subnet": "10.89.0"}]}, f
        )
    return cni


def crio_images(node) -> list:
    """The shell lines that put a registered CRI-O node's images into its store before CRI-O
    starts, since nothing can be pulled (lab/crioimport, built on CRI-O's own image libraries):
    its pause image (the stand-in program; CRI-O asks for it at every sandbox) and the cluster
    reach's (Debian's static busybox: the probe's and the workloads' too); and the image policy a
    CRI-O node's containers-common package installs."""
    from tests.helpers.labcontainerd import crio_binary

    default = run([crio_binary(), "--config", "/dev/null", "config"], timeout_s=30, check=True).stdout
    pause = re.search(r'^#? ?pause_image = "(.*)"', default, re.M).group(1)
    images = os.path.join(HERE, "lab/standin/images.py")
    reader, sandbox = os.path.join(node.dir, "read.tar"), os.path.join(node.dir, "pause.tar")
    run(["python3", images, sandbox, built("standin", "standin"), f"{pause}=pause"], timeout_s=60, check=True)
    run(["python3", images, "--busybox", reader, "/bin/busybox", READ_IMAGE], timeout_s=60, check=True)
    store = "containers-storage:[vfs@/var/lib/containers/storage+/run/containers/storage]"
    policy = json.dumps({"default": [{"type": "insecureAcceptAnything"}]})
    importer = built("crio-import", "crio-import")
    return [
        "mkdir -p /etc/containers",
        f"echo '{policy}' >/etc/containers/policy.json",
        f"{importer} oci-archive:{sandbox} '{store}{pause}'",
        f"{importer} oci-archive:{reader} '{store}{READ_IMAGE}'",
    ]


def crio_network(node) -> str:
    """A registered CRI-O node's drop-in for the stand-in Pod network: CRI-O reports its network
    ready, so kubelet asks it for a Pod's sandbox (its handler is checked before any image)."""
    cni = pod_network(node)
    return f'[crio.network]\nnetwork_dir = "{cni}/net.d"\nplugin_dirs = ["{cni}/bin"]\n'


def pod_ready(node) -> tuple:
    """What a registered node's containerd needs to run Pods (its config's CRI part, and hook
    lines run inside before it starts and once it answers): the stand-in Pod network in the
    node's directory, its root on a plain directory (overlayfs snapshots cannot sit on the
    node's /var/lib overlay), its runc shim beside a built binary, and the images nothing can
    pull here, imported into its store: its sandbox image (the stand-in program) and the
    cluster reach's (Debian's static busybox, lab/standin/images.py)."""
    from gpuop.judgment.configs import kubelet_node_cri

    cni = pod_network(node)
    containerd = binary(node.version)
    if not os.path.exists(os.path.join(os.path.dirname(containerd), "containerd-shim-runc-v2")):
        run([os.path.join(HERE, "lab/build.sh"), "shim", node.version], timeout_s=1800, check=True)
    default = run([containerd, "config", "default"], timeout_s=30, check=True).stdout
    sandbox = next(
        line.split("=", 1)[1].strip().strip("'\"")
        for line in default.splitlines()
        if line.strip().startswith(("sandbox_image", "sandbox ")) and "=" in line
    )
    images = os.path.join(HERE, "lab/standin/images.py")
    pause, reader = os.path.join(node.dir, "pause.tar"), os.path.join(node.dir, "read.tar")
    run(["python3", images, pause, built("standin", "standin"), f"{sandbox}=pause"], timeout_s=60, check=True)
    run(["python3", images, "--busybox", reader, "/bin/busybox", READ_IMAGE], timeout_s=60, check=True)
    ctr = "ctr --address /run/containerd/containerd.sock --namespace k8s.io --timeout 20s"
    store = os.path.join(node.dir, "containerd-root")  # where lab/simnode.sh stop looks for its Pods' cgroups too
    return (
        kubelet_node_cri(f"{cni}/bin", f"{cni}/net.d"),
        [f"mkdir -p {store} /var/lib/containerd", f"mount --bind {store} /var/lib/containerd"],
        [
            f"{ctr} images import --all-platforms {pause} >/dev/null",
            f"{ctr} images import --all-platforms {reader} >/dev/null",
        ],
    )
