"""Simulated GPU nodes for the node audit: each in its own mount, pid and UTS namespaces
(lab/simnode.sh), with its own containerd of a chosen version at the default paths, its own sshd
on a loopback port, and a Node of the same name in the lab cluster (tests/helpers/fleetobjects.py);
and what tells that nothing of theirs leaked onto the host."""

import contextlib
import glob
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass, field

import tomli_w

from gpuop.judgment.configs import seed_config
from lab import labproc
from tests.helpers import ROOT as HERE  # the project
from tests.helpers import drivers
from tests.helpers.fleetobjects import create_settled, delete_cluster_objects
from tests.helpers.kube import LAB
from tests.helpers.kubelets import crio_images, crio_network, kubelet, pod_ready
from tests.helpers.labcontainerd import binary, built, crictl, crio_binary, nvidia_ctk_of
from tests.helpers.layouts import CONFIG, generated_header
from tests.helpers.proc import run
from tests.helpers.ssh import free_port, keygen, sshd_config

NODE_SH = os.path.join(HERE, "lab/simnode.sh")


@dataclass
class Node:
    """One simulated node: its version, files and hooks, as an operator left it."""

    name: str
    version: str
    hostname: str = ""  # the node's own hostname; empty: its Node's name
    imports: str = "/etc/containerd/conf.d/*.toml"  # its config's one import; empty: a config with no imports
    before: list = field(default_factory=list)  # shell lines run inside, before containerd starts
    after: list = field(default_factory=list)  # ... once its socket is there
    kubelet: str = ""  # a real kubelet's endpoint on this node, started last; empty: none
    kubelet_layout: str = "yaml"  # how its configuration is laid out: see kubelet()
    cdi_pod: bool = False  # a GPU Pod with no RuntimeClass bound to it too (the GPU Operator's CDI mode)
    api_handlers: tuple = ()  # what its Node's status says is loaded, as a kubelet on containerd 2.x reports it
    supervised: bool = False  # its containerd started again whenever it ends (systemd's Restart=always)
    aks_pod: bool = False  # a GPU Pod of RuntimeClass fleet-aks (handler nvidia-container-runtime) bound to it too
    knobs: dict = field(default_factory=dict)  # its own keys in the nodes file (gpu_handler...)
    registered: bool = False  # its kubelet (on its own containerd) registers it in the lab cluster: Pods run on it
    files: dict = field(default_factory=dict)  # /etc/containerd files written before anything
    nvidia_runtime: bool = (
        False  # a stand-in /usr/bin/nvidia-container-runtime (logs each call, runs runc), and its hook
    )
    nvidia_ctk: str = ""  # the real nvidia-ctk of this release in its /usr/bin, as the toolkit's package installs it
    crio: dict = field(default_factory=dict)  # /etc/crio files: the node runs the lab's CRI-O (crio.conf: CRIO_CONF)
    containerd_too: bool = False  # a CRI-O node whose containerd of ``version`` runs beside it
    k3s_template: str = ""  # k3s-like: its config.toml carries k3s's header, its config.toml.tmpl is its config and
    #                         this text after it (an operator's full template), and each restart of its containerd
    #                         (supervised) renders config.toml from the template first, as k3s does
    driver: object = None  # plants its NVIDIA driver's files (tests/helpers/drivers.py: a state, given a Tree)
    dir: str = ""
    port: int = 0
    host_key: str = ""


# A CRI-O node's own crio.conf, as its distribution leaves it: Debian's runc and conmon; vfs, since
# its /var/lib is an overlay (CRI-O's default overlay driver cannot sit on one); cgroupfs, no systemd.
CRIO_CONF = """[crio]
storage_driver = "vfs"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/sbin/runc"
runtime_type = "oci"
monitor_path = "/usr/bin/conmon"
"""
CRIO_SOCKET = "/var/run/crio/crio.sock"

SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")  # what kubelet sets


def _host_tree(path: str):
    """A host path as ``host_files`` compares it. Under /run/containerd the runc shims' state
    (``runc/``) is left out, and none is the same as an empty one: the lab's kubelet node, in the
    lane beside (lab/kubeletnode.sh), runs its Pods through the lab containerd's shims, whose runc
    state goes to their fixed /run/containerd/runc on the host, made and emptied as that lane's
    tests run; a simulated node's own is in its private /run."""
    if path != "/run/containerd":
        return tree(path) if os.path.isdir(path) else os.path.exists(path)
    found = tree(path) if os.path.isdir(path) else {}
    return {p: v for p, v in found.items() if p != "runc" and not p.startswith("runc/")}


def host_files(cgroups: bool = True) -> dict:
    """What a kubelet and its runtime would write on the host if their namespace leaked:
    the node paths' trees, the stand-in runtime's place, the global sysctls kubelet sets, and
    (``cgroups``) the containers' cgroups: left out where no Pod of the caller's runs, since
    another lane's kubelets make and remove theirs meanwhile."""
    found = {
        p: _host_tree(p)
        for p in (
            "/etc/containerd",
            "/var/lib/containerd",
            "/var/lib/kubelet",
            "/var/log/pods",
            "/var/lib/cni",
            "/run/containerd",
            "/usr/bin/nvidia-container-runtime",
            "/usr/local/nvidia",
            "/etc/crio",
            "/var/lib/crio",
            "/var/lib/containers",
            "/var/log/crio",
            "/run/crio",
            "/usr/share/containers",
        )
    }
    for s in SYSCTLS:
        with open(f"/proc/sys/{s}") as f:
            found[s] = f.read()
    if cgroups:
        # a container's, left behind: containerd's (k8s.io/ID), CRI-O's (crio-ID, crio/crio-ID)
        found["cgroups"] = sorted(
            p for pattern in ("k8s.io/*", "crio-*", "crio/*") for p in glob.glob(f"/sys/fs/cgroup/*/{pattern}/")
        )
    return found


def k3s_like(node: Node, files: dict) -> dict:
    """``files`` as k3s lays them out: its config.toml written by k3s (its header), the
    template beside it; and the render k3s makes at each start (lab/multicall), from the template,
    else from the built-in config (the node's own, k3s's header on it), before each restart."""
    render = built("multicall", "k3s", "2.4.2")  # the one lab/build.sh all builds; any 2.x renders alike
    base = os.path.join(node.dir, "k3s-built-in.toml")
    with open(base, "w") as f:
        f.write(generated_header("k3s") + files[CONFIG])
    restart = os.path.join(node.dir, "restart.sh")
    with open(restart, "w") as f:
        f.write(f"#!/bin/sh\nexec {render} render {base} /etc/containerd/config.toml.tmpl {CONFIG}\n")
    os.chmod(restart, 0o755)
    return {
        **files,
        CONFIG: generated_header("k3s") + files[CONFIG],
        "/etc/containerd/config.toml.tmpl": files[CONFIG] + node.k3s_template,
    }


def start(node: Node, root: str, pubkey: str) -> Node:
    """Start ``node`` under ``root`` (its files, its sshd trusting ``pubkey``)."""
    node.dir, node.port = os.path.join(root, node.name), free_port()
    os.makedirs(os.path.join(node.dir, "etc", "conf.d"), exist_ok=True)
    node_cri, store, imports = pod_ready(node) if node.registered and not node.crio else (None, [], [])
    store += crio_images(node) if node.registered and node.crio else []
    crio_files = {
        **node.crio,
        **({"/etc/crio/crio.conf.d/20-network.conf": crio_network(node)} if node.registered and node.crio else {}),
    }
    after = (
        node.after
        + imports
        + (
            kubelet(node.dir, node.kubelet, node.kubelet_layout, node.name if node.registered else "")
            if node.kubelet
            else []
        )
    )
    config = seed_config(node.imports, node_cri=node_cri)
    if not node.imports:
        del config["imports"]
    files = {CONFIG: tomli_w.dumps(config), **node.files}
    if node.k3s_template:
        files = k3s_like(node, files)
    if node.nvidia_runtime:  # as the toolkit's package installs it (lab/simnode.sh lays usr-bin over /usr/bin)
        stand_in = os.path.join(node.dir, "usr-bin", "nvidia-container-runtime")
        os.makedirs(os.path.dirname(stand_in), exist_ok=True)
        with open(stand_in, "w") as f:
            f.write(f'#!/bin/sh\necho "$*" >>{node.dir}/nvidia-container-runtime.log\nexec runc "$@"\n')
        os.chmod(stand_in, 0o755)
        hook = os.path.join(node.dir, "usr-bin", "nvidia-container-runtime-hook")  # the OCI hook, a no-op here
        with open(hook, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(hook, 0o755)
    if node.driver:  # lab/simnode.sh lays DIR/driver over the node's own paths
        node.driver(drivers.Tree(os.path.join(node.dir, "driver")))
    if node.nvidia_ctk:
        os.makedirs(os.path.join(node.dir, "usr-bin"), exist_ok=True)
        shutil.copy2(nvidia_ctk_of(node.nvidia_ctk), os.path.join(node.dir, "usr-bin", "nvidia-ctk"))
    for path, text in files.items():
        with open(os.path.join(node.dir, "etc", os.path.relpath(path, "/etc/containerd")), "w") as f:
            f.write(text)
    for path, text in crio_files.items():  # lab/simnode.sh binds DIR/crio over the node's /etc/crio
        os.makedirs(os.path.dirname(os.path.join(node.dir, "crio", os.path.relpath(path, "/etc/crio"))), exist_ok=True)
        with open(os.path.join(node.dir, "crio", os.path.relpath(path, "/etc/crio")), "w") as f:
            f.write(text)
    # kubelet asks a new containerd for its CRI status within seconds of its start, and 1.7+
    # then writes its introspection uuid once, for good: a real node has it before any audit.
    first_status = (
        f"{crictl()} --config /dev/null --runtime-endpoint unix:///run/containerd/containerd.sock "
        "--timeout 3s info >/dev/null 2>&1 || true"
    )
    for hook, lines in (("before.sh", store + node.before), ("after.sh", after + [first_status])):
        if lines:
            path = os.path.join(node.dir, hook)
            with open(path, "w") as f:
                f.write("#!/bin/sh\nset -e\n" + "\n".join(lines) + "\n")
            os.chmod(path, 0o755)
    host_key = keygen(os.path.join(node.dir, "host_ed25519"))
    with open(os.path.join(node.dir, "authorized_keys"), "w") as f:
        f.write(pubkey + "\n")
    with open(os.path.join(node.dir, "sshd_config"), "w") as f:
        f.write(sshd_config(node.port, f"{node.dir}/host_ed25519", f"{node.dir}/authorized_keys"))
    node.host_key = host_key
    env = {**os.environ, "SIMNODE_RESTART": "always" if node.supervised else "no"}
    if node.containerd_too:
        env["SIMNODE_ALSO"] = binary(node.version)
    runtime = crio_binary() if node.crio else binary(node.version)
    run([NODE_SH, "start", node.dir, runtime, node.hostname or node.name, LAB], timeout_s=60, check=True, env=env)
    return node


@contextlib.contextmanager
def running(nodes, root: str):
    """``nodes`` started under ``root``, their sshd trusting a key made there (its path is
    yielded), stopped and their cluster objects deleted at the end, whatever happened; and,
    when all went well, nothing of theirs left on the host (``host_files``; the Pods' cgroups
    only where one of them is registered: the others run no Pod)."""
    pods = any(n.registered for n in nodes)
    host_before = host_files(cgroups=pods)
    key, pubkey = keypair(root)
    delete_cluster_objects(nodes)
    started = []
    try:
        for n in nodes:
            started.append(n)  # before it starts: one whose start fails half-way is stopped too
            start(n, root, pubkey)
        yield key
    finally:
        for n in started:
            stop(n)
        delete_cluster_objects(nodes)
    after = host_files(cgroups=pods)
    assert after == host_before, "changed on the host: " + "; ".join(
        f"{k}: {host_before.get(k)!r} -> {after.get(k)!r}"
        if not isinstance(after.get(k), dict)
        else f"{k}: {sorted(set(after[k]) ^ set(host_before.get(k) or {}))} added or removed, "
        f"{sorted(p for p in after[k] if p in (host_before.get(k) or {}) and after[k][p] != host_before[k][p])} changed"
        for k in sorted(set(after) | set(host_before))
        if after.get(k) != host_before.get(k)
    )


@contextlib.contextmanager
def fleet(nodes, root: str):
    """``running`` nodes with the fleet's objects settled in the lab cluster (``create_settled``)."""
    with running(nodes, root) as key:
        create_settled(nodes)
        yield key


def stop(node: Node):
    if node.dir:  # never started: nothing runs
        run([NODE_SH, "stop", node.dir], timeout_s=30, check=True)


def ns_pid(node: Node) -> int:
    """The node's first process, as the host sees it (its files are under /proc/PID/root)."""
    return int(run([NODE_SH, "pid", node.dir], timeout_s=10, check=True).stdout.split()[0])


def node_containerd(node: Node) -> int:
    """The host's pid of the node's own containerd (the one systemd would start: no flags), found
    in the node's pid namespace by its command line."""
    return _own_daemon(node, binary(node.version))


def node_runtime(node: Node) -> int:
    """The host's pid of the node's own runtime: its CRI-O on a CRI-O node, else its containerd."""
    return _own_daemon(node, crio_binary()) if node.crio else node_containerd(node)


def _own_daemon(node: Node, exe: str) -> int:
    ns, own = os.readlink(f"/proc/{ns_pid(node)}/ns/pid"), [exe]
    found = []
    for pid, args in labproc.processes():
        try:
            if args == own and os.readlink(f"/proc/{pid}/ns/pid") == ns:
                found.append(pid)
        except OSError:
            pass
    assert len(found) == 1, f"node {node.name}: daemons {found} of {exe}"
    return found[0]


def tree(path: str) -> dict:
    """Every entry under ``path``: type, mode, size, mtime and (files) content hash."""
    found = {}
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(p, path)] = (
                stat.S_IFMT(st.st_mode),
                st.st_mode & 0o7777,
                st.st_size,
                st.st_mtime_ns,
                digest,
            )
    return found


def etc_containerd(node: Node) -> dict:
    """The node's /etc/containerd as it sees it (``tree``)."""
    return tree(f"/proc/{ns_pid(node)}/root/etc/containerd")


def node_files(node: Node) -> dict:
    """Every file the node's processes may write, read from the host: its /etc/containerd and
    /run as the node sees them, and everything written to its /var/lib and /var/log (a CRI-O
    node's: its /etc/crio and /etc too)."""
    root = f"/proc/{ns_pid(node)}/root"
    found = {
        "/etc/containerd": etc_containerd(node),
        "/run": tree(root + "/run"),
        "/var/lib": tree(os.path.join(node.dir, "varlib", "upper")),
        "/var/log": tree(os.path.join(node.dir, "varlog", "upper")),
    }
    if node.crio:  # its /etc/crio, what it wrote in /etc, and its private /var/log
        found.update(
            {
                "/etc/crio": tree(root + "/etc/crio"),
                "/etc": tree(os.path.join(node.dir, "etc-upper")),
                "/var/log": tree(root + "/var/log"),
            }
        )
    return found


def keypair(root: str) -> tuple:
    key = os.path.join(root, "id_ed25519")
    return key, keygen(key)
