"""A simulated fleet of real GPU nodes for the node audit: each node in its own mount, pid and
UTS namespaces (lab/simnode.sh), with its own containerd of a chosen version at the default paths,
its own sshd on a loopback port, and a kwok Node of the same name with Pods bound to it."""

import contextlib
import glob
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field

import tomli_w
import yaml

from gpuop.containerd import main_config, nvidia_dropin
from lab import labcluster, labproc
from tests.helpers.kube import LAB, kubectl
from tests.helpers.labcontainerd import binary, built, crictl, nvidia_ctk
from tests.helpers.proc import run
from tests.helpers.ssh import free_port, keygen, sshd_config

from tests.helpers import ROOT as HERE  # the project
NODE_SH = os.path.join(HERE, "lab/simnode.sh")
NAMESPACE = "gpuop-fleet"
MARK = "gpuop-fleet"  # label and taint of the fleet's Nodes: the lab's own Pods stay off them
CONFIG = "/etc/containerd/config.toml"
DROPIN = "/etc/containerd/conf.d/99-nvidia.toml"


@dataclass
class Node:
    """One simulated node: its version, files and hooks, as an operator left it."""
    name: str
    version: str
    hostname: str = ""  # the node's own hostname; empty: its Node's name
    imports: str = "/etc/containerd/conf.d/*.toml"
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
    dir: str = ""
    port: int = 0
    host_key: str = ""


# A CDI spec of GPU devices, where the node's containerd reads specs (/var/run/cdi: inside the
# node's own /run), as the toolkit's nvidia-cdi-refresh writes it.
CDI_SPEC = ["mkdir -p /var/run/cdi",
            "printf 'cdiVersion: 0.6.0\\nkind: nvidia.com/gpu\\ndevices:\\n- name: \"0\"\\n' >/var/run/cdi/nvidia.yaml"]


def nvidia_ctk_configure() -> str:
    """The real toolkit CLI configuring the node's own containerd, as the GPU Operator does."""
    return (f"{nvidia_ctk()} runtime configure --runtime=containerd --config={CONFIG} "
            f"--drop-in-config={DROPIN} >/dev/null")


def aks_config() -> str:
    """An AKS GPU node's config.toml (Azure/AgentBaker, docs/fleets.md): its GPU handler is named
    nvidia-container-runtime and is the default, beside runc and untrusted; none is named nvidia."""
    cfg = main_config("/etc/containerd/conf.d/*.toml", default_runtime="nvidia-container-runtime")
    runtimes = cfg["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    nvidia = nvidia_dropin()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    runtimes.update({"nvidia-container-runtime": nvidia, "untrusted": {"runtime_type": "io.containerd.runc.v2"}})
    return tomli_w.dumps(cfg)


def write_file(path: str, text: str) -> str:
    return f"cat >{path} <<'GPUOP_EOF'\n{text}GPUOP_EOF"


def another_containerd(version: str, name: str, nvidia: bool = False) -> list:
    """A second daemon beside the node's own, on its own config, root and socket
    (/run/containerd-NAME/containerd.sock), as nodes that run two have; with ``nvidia``, the
    nvidia runtime is loaded in it (the one a ``kubelet`` is pointed at)."""
    cfg = main_config(f"/etc/containerd/{name}.d/*.toml")
    cfg.update({"root": f"/var/lib/containerd-{name}", "state": f"/run/containerd-{name}",
                "grpc": {"address": f"/run/containerd-{name}/containerd.sock"}})
    if nvidia:
        cfg["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"].update(
            nvidia_dropin()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"])
    return [write_file(f"/etc/containerd/{name}.toml", tomli_w.dumps(cfg)),
            f"setsid {binary(version)} --config /etc/containerd/{name}.toml </dev/null >/dev/null 2>&1 &",
            f"n=0; until [ -S /run/containerd-{name}/containerd.sock ]; do n=$((n+1)); [ $n -lt 200 ]; sleep 0.1; done"]


K3S_SOCKET = "/run/k3s/containerd/containerd.sock"  # RKE2's and k3s's own containerd (docs/fleets.md)


def _distro_containerd(containerd: str, data: str, program: str, files: dict | None = None) -> list:
    """A distribution's containerd beside the node's own, started as k3s and RKE2 start it: its
    config under DATA/etc/containerd as they generate it (their header), with the nvidia runtime
    in it, FILES beside it, its socket, state and root as flags (docs/fleets.md)."""
    cfg = main_config(f"{data}/etc/containerd/conf.d/*.toml")
    cfg["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"].update(
        nvidia_dropin()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"])
    header = f"# File generated by {program}. DO NOT EDIT. Use config.toml.tmpl instead.\n"
    written = {"config.toml": header + tomli_w.dumps(cfg), **(files or {})}
    return [f"mkdir -p {data}/etc/containerd",
            *(write_file(f"{data}/etc/containerd/{name}", text) for name, text in written.items()),
            f"setsid {containerd} -c {data}/etc/containerd/config.toml -a {K3S_SOCKET} "
            f"--state /run/k3s/containerd --root {data}/containerd </dev/null >/dev/null 2>&1 &",
            f"n=0; until [ -S {K3S_SOCKET} ]; do n=$((n+1)); [ $n -lt 200 ]; sleep 0.1; done"]


# An operator's template for RKE2 that extends the built-in one with a registry setting only: the
# nvidia runtime the toolkit wrote into config.toml is not in it.
RKE2_TEMPLATE = ('{{ template "base" . }}\n'
                 '[plugins."io.containerd.cri.v1.images".registry]\n  config_path = "/etc/containerd/certs.d"\n')


def rke2_containerd(version: str) -> list:
    """RKE2's containerd: a real containerd binary, RKE2's flags (its kubelet is a process), its
    config.toml edited by the toolkit beside an operator's config-v3.toml.tmpl, and no NVIDIA
    runtime binary where RKE2 looks at start: its next start loses the nvidia runtime."""
    return _distro_containerd(binary(version), "/var/lib/rancher/rke2/agent", "rke2",
                              {"config-v3.toml.tmpl": RKE2_TEMPLATE})


# The node's own /usr/local, where the GPU Operator installs the toolkit: an overlay whose
# writes land in the node's own /run.
_USR_LOCAL = ["mkdir -p /run/usrlocal/upper /run/usrlocal/work",
              "mount -t overlay overlay -o lowerdir=/usr/local,upperdir=/run/usrlocal/upper,"
              "workdir=/run/usrlocal/work /usr/local"]
# The toolkit's runtime where k3s looks for it at start (gpuop.regen).
TOOLKIT_RUNTIME = [*_USR_LOCAL, "mkdir -p /usr/local/nvidia/toolkit",
                   "printf '#!/bin/sh\\nexit 1\\n' >/usr/local/nvidia/toolkit/nvidia-container-runtime",
                   "chmod 755 /usr/local/nvidia/toolkit/nvidia-container-runtime"]
# What the toolkit's image carries for its installer (--toolkit-source-root): the libraries and
# executables it copies, stand-ins here (none of them runs while the installer configures).
_ARTIFACTS = "/run/toolkit-artifacts"
_ARTIFACT_LIBS = ("libnvidia-container.so.1", "libnvidia-container-go.so.1")
_ARTIFACT_BINS = ("nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-cli", "nvidia-container-runtime-hook",
                  "nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy")


def nvidia_ctk_installer(restart_mode: str) -> list:
    """The GPU Operator's toolkit installer (the real ``nvidia-ctk-installer`` of the toolkit's
    release), run on the node as its toolkit Pod runs it, with its defaults for containerd (the
    config, the conf.d drop-in, the socket) and ``restart_mode``: ``none`` writes and never
    restarts; ``signal`` sends the daemon SIGHUP, which ends it. It runs once the daemon answers
    CRI, in a session of its own as in its container.

    Its signal goes to the pid in the credentials of the daemon's answer on the socket; measured
    here, about 1 run in 8 reads pid 0 there, signals its own process group (and so itself),
    and says "Successfully signaled containerd" while the daemon runs on: the audit then finds
    the drop-in not loaded, as with mode none. The tests need the signal's outcome, so in mode
    signal it runs again (20 times at most: 6 missed in a row once, under two lanes' load) while
    the daemon it was meant for still runs, and says so when it gives up."""
    lib, usr_bin = f"{_ARTIFACTS}/usr/lib/x86_64-linux-gnu", f"{_ARTIFACTS}/usr/bin"
    install = (f"setsid -w {nvidia_ctk('nvidia-ctk-installer')} --runtime=containerd --no-daemon "
               f"--restart-mode={restart_mode} --toolkit-source-root={_ARTIFACTS} >>/run/toolkit-installer.log 2>&1 "
               "|| { cat /run/toolkit-installer.log; exit 1; }")
    if restart_mode == "signal":
        install = ("old=$(pgrep -o -x containerd); n=0; while kill -0 \"$old\" 2>/dev/null; do n=$((n+1)); "
                   "[ $n -le 20 ] || { echo \"the installer's SIGHUP missed containerd $((n-1)) times\"; "
                   f"tail -n 5 /run/toolkit-installer.log; exit 1; }}; {install}; sleep 0.3; done")
    return [*_USR_LOCAL, f"mkdir -p {lib} {usr_bin}",
            *(f": >{lib}/{name}" for name in _ARTIFACT_LIBS),
            *(f"printf '#!/bin/sh\\nexit 0\\n' >{usr_bin}/{name}; chmod 755 {usr_bin}/{name}"
              for name in _ARTIFACT_BINS),
            *cri_back(), install]


def cri_back() -> list:
    """Wait (20 s at most) until the node's containerd answers CRI again."""
    return [f"n=0; until {crictl()} --config /dev/null --runtime-endpoint unix:///run/containerd/containerd.sock "
            "--timeout 2s info >/dev/null 2>&1; do n=$((n+1)); [ $n -lt 100 ]; sleep 0.2; done"]


def k3s(version: str) -> list:
    """k3s beside the node's own containerd: one multicall binary (lab/multicall, of containerd
    ``version``), its containerd started through its ``containerd`` link with k3s's flags, and the
    k3s process that embeds kubelet (there is no kubelet process), whose endpoint is in the
    kubelet.conf.d drop-in under its data directory, as k3s 1.32+ writes it; the GPU Operator's
    toolkit installed where k3s finds it at start, so its next start keeps the nvidia runtime."""
    multicall = run([os.path.join(HERE, "lab/build.sh"), "multicall", version], timeout_s=1800,
                    check=True).stdout.strip()
    data = "/var/lib/rancher/k3s"
    dropin = f"containerRuntimeEndpoint: unix://{K3S_SOCKET}\n"
    return [f"mkdir -p {data}/agent/etc/kubelet.conf.d",
            write_file(f"{data}/agent/etc/kubelet.conf.d/00-k3s-defaults.conf", dropin),
            f"setsid {multicall}/k3s server --data-dir {data} </dev/null >/dev/null 2>&1 &",
            *TOOLKIT_RUNTIME,
            *_distro_containerd(f"{multicall}/containerd", f"{data}/agent", "k3s"),
            # what the embedded kubelet does first: ask its runtime's CRI status (see start())
            f"{crictl()} --config /dev/null --runtime-endpoint unix://{K3S_SOCKET} --timeout 3s info >/dev/null 2>&1 || true"]


CLUSTER_DIR = os.path.expanduser(f"~/.kwok/clusters/{LAB}")  # the lab's CA and admin kubeconfig
READ_IMAGE = "docker.io/library/busybox:1.37"  # the cluster reach's default image (node_pod_image), as the lab imports it


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
        config = labcluster.kubelet_config(endpoint, free_port(), f"{CLUSTER_DIR}/pki/ca.crt", **labcluster.REAL_NODE)
    else:
        config = labcluster.kubelet_config(endpoint, free_port())
    head = {k: config[k] for k in ("apiVersion", "kind")}
    if layout == "yaml":
        files, flags = {"kubelet.yaml": yaml.safe_dump(config)}, f"--config {dir_}/kubelet.yaml"
    elif layout == "eks":
        rest = {k: v for k, v in config.items() if k != "containerRuntimeEndpoint"}
        # kubelet defaults what a drop-in leaves out before it merges (enforceNodeAllocatable
        # "pods", which needs QoS cgroups): the drop-in says "none" again.
        dropin = {**head, "containerRuntimeEndpoint": endpoint, "cgroupsPerQOS": False,
                  "enforceNodeAllocatable": ["none"]}
        files = {"config.json": json.dumps(rest), "config.json.d/00-nodeadm.conf": json.dumps(dropin, indent=2)}
        flags = f"--config {dir_}/config.json --config-dir {dir_}/config.json.d"
    elif layout == "rke2":
        files = {"kubelet.conf.d/00-rke2-defaults.conf": yaml.safe_dump(config)}
        flags = f"--config-dir={dir_}/kubelet.conf.d"
    else:
        raise ValueError(f"kubelet layout {layout}: expected yaml, eks or rke2")
    masks = [f"cat /proc/sys/{f} >{dir_}/sysctl-{f.replace('/', '.')}; "
             f"mount --bind {dir_}/sysctl-{f.replace('/', '.')} /proc/sys/{f}"
             for f in ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")]
    writes = [line for name, text in files.items()
              for line in (f"mkdir -p {os.path.dirname(f'{dir_}/{name}')}", write_file(f"{dir_}/{name}", text + "\n"))]
    if register:
        flags += (f" --kubeconfig {CLUSTER_DIR}/kubeconfig.yaml --hostname-override {register} --node-ip {host_ip()}"
                  f" --node-labels {MARK}=true --register-with-taints {MARK}=true:NoSchedule")
    return [*masks, *writes,
            f"mkdir -p {dir_}/varlog/upper {dir_}/varlog/work",
            f"mount -t overlay overlay -o lowerdir=/var/log,upperdir={dir_}/varlog/upper,workdir={dir_}/varlog/work /var/log",
            f"setsid {built('kubelet', 'kubelet')} {flags} --root-dir /var/lib/kubelet "
            f"</dev/null >{dir_}/kubelet.log 2>&1 &"]


def pod_ready(node: Node) -> tuple:
    """What a registered node's containerd needs to run Pods (its config's CRI part, and hook
    lines run inside before it starts and once it answers): the stand-in Pod network in the
    node's directory, its root on a plain directory (overlayfs snapshots cannot sit on the
    node's /var/lib overlay), its runc shim beside a built binary, and the images nothing can
    pull here, imported into its store: its sandbox image (the stand-in program) and the
    cluster reach's (Debian's static busybox, lab/standin/images.py)."""
    from gpuop.containerd import kubelet_node_cri

    cni = os.path.join(node.dir, "cni")
    os.makedirs(os.path.join(cni, "bin"), exist_ok=True)
    os.makedirs(os.path.join(cni, "net.d"), exist_ok=True)
    with open(os.path.join(HERE, "lab/standin/cni"), "rb") as f, open(os.path.join(cni, "bin/gpuop-lab"), "wb") as out:
        out.write(f.read())
    os.chmod(os.path.join(cni, "bin/gpuop-lab"), 0o755)
    if not os.path.lexists(os.path.join(cni, "bin/loopback")):
        os.symlink("/usr/lib/cni/loopback", os.path.join(cni, "bin/loopback"))
    with open(os.path.join(cni, "net.d/10-gpuop-lab.conflist"), "w") as f:
        json.dump({"cniVersion": "1.0.0", "name": "gpuop-lab", "plugins": [{"type": "gpuop-lab", "subnet": "10.89.0"}]}, f)
    containerd = binary(node.version)
    if not os.path.exists(os.path.join(os.path.dirname(containerd), "containerd-shim-runc-v2")):
        run([os.path.join(HERE, "lab/build.sh"), "shim", node.version], timeout_s=1800, check=True)
    default = run([containerd, "config", "default"], timeout_s=30, check=True).stdout
    sandbox = next(line.split("=", 1)[1].strip().strip("'\"") for line in default.splitlines()
                   if line.strip().startswith(("sandbox_image", "sandbox ")) and "=" in line)
    images = os.path.join(HERE, "lab/standin/images.py")
    pause, reader = os.path.join(node.dir, "pause.tar"), os.path.join(node.dir, "read.tar")
    run(["python3", images, pause, built("standin", "standin"), f"{sandbox}=pause"], timeout_s=60, check=True)
    run(["python3", images, "--busybox", reader, "/bin/busybox", READ_IMAGE], timeout_s=60, check=True)
    ctr = "ctr --address /run/containerd/containerd.sock --namespace k8s.io --timeout 20s"
    store = os.path.join(node.dir, "containerd-root")
    return (kubelet_node_cri(f"{cni}/bin", f"{cni}/net.d"),
            [f"mkdir -p {store} /var/lib/containerd", f"mount --bind {store} /var/lib/containerd"],
            [f"{ctr} images import --all-platforms {pause} >/dev/null", f"{ctr} images import --all-platforms {reader} >/dev/null"])


SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")  # what kubelet sets


def host_files() -> dict:
    """What a kubelet and its containerd would write on the host if their namespace leaked:
    the node paths' trees, the stand-in runtime's place, and the global sysctls kubelet sets."""
    found = {p: tree(p) if os.path.isdir(p) else os.path.exists(p)
             for p in ("/etc/containerd", "/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods",
                       "/var/lib/cni", "/run/containerd", "/usr/bin/nvidia-container-runtime", "/usr/local/nvidia")}
    for s in SYSCTLS:
        with open(f"/proc/sys/{s}") as f:
            found[s] = f.read()
    found["cgroups"] = sorted(glob.glob("/sys/fs/cgroup/*/k8s.io/*/"))  # a container's, left behind
    return found


def start(node: Node, root: str, pubkey: str) -> Node:
    """Start ``node`` under ``root`` (its files, its sshd trusting ``pubkey``)."""
    node.dir, node.port = os.path.join(root, node.name), free_port()
    os.makedirs(os.path.join(node.dir, "etc", "conf.d"), exist_ok=True)
    node_cri, store, imports = pod_ready(node) if node.registered else (None, [], [])
    after = node.after + imports + (kubelet(node.dir, node.kubelet, node.kubelet_layout, node.name if node.registered else "")
                                    if node.kubelet else [])
    files = {CONFIG: tomli_w.dumps(main_config(node.imports, node_cri=node_cri)), **node.files}
    for path, text in files.items():
        with open(os.path.join(node.dir, "etc", os.path.relpath(path, "/etc/containerd")), "w") as f:
            f.write(text)
    # kubelet asks a new containerd for its CRI status within seconds of its start, and 1.7+
    # then writes its introspection uuid once, for good: a real node has it before any audit.
    first_status = (f"{crictl()} --config /dev/null --runtime-endpoint unix:///run/containerd/containerd.sock "
                    "--timeout 3s info >/dev/null 2>&1 || true")
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
    run([NODE_SH, "start", node.dir, binary(node.version), node.hostname or node.name, LAB], timeout_s=60,
        check=True, env=env)
    return node


@contextlib.contextmanager
def running(nodes, root: str):
    """``nodes`` started under ``root``, their sshd trusting a key made there (its path is
    yielded), stopped and their cluster objects deleted at the end, whatever happened; and,
    when all went well, nothing of theirs left on the host (``host_files``)."""
    host_before = host_files()
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
    assert host_files() == host_before


def stop(node: Node):
    if node.dir:  # never started: nothing runs
        run([NODE_SH, "stop", node.dir], timeout_s=30, check=True)


def ns_pid(node: Node) -> int:
    """The node's first process, as the host sees it (its files are under /proc/PID/root)."""
    return int(run([NODE_SH, "pid", node.dir], timeout_s=10, check=True).stdout.split()[0])


def node_containerd(node: Node) -> int:
    """The host's pid of the node's own containerd (the one systemd would start: no flags), found
    in the node's pid namespace by its command line."""
    ns, own = os.readlink(f"/proc/{ns_pid(node)}/ns/pid"), [binary(node.version)]
    found = []
    for pid, args in labproc.processes():
        try:
            if args == own and os.readlink(f"/proc/{pid}/ns/pid") == ns:
                found.append(pid)
        except OSError:
            pass
    assert len(found) == 1, f"node {node.name}: containerds {found}"
    return found[0]


def _write_nodes_file(nodes, key: str, path: str, **rest) -> str:
    """A nodes file at ``path`` for ``nodes``: the SSH settings for all (their known_hosts beside
    it), and ``rest`` (its hosts, or what the cluster's listing takes)."""
    known = os.path.join(os.path.dirname(path), "known_hosts")
    with open(known, "w") as f:
        f.write("".join(f"[127.0.0.1]:{n.port} {n.host_key}\n" for n in nodes))
    doc = {"defaults": {"ssh_user": "root", "ssh_key": key, "ssh_known_hosts_file": known,
                        "crictl_binary": crictl()}, **rest}
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def defaults_file(nodes, key: str, path: str, knobs: dict | None = None) -> str:
    """A nodes file with no hosts: the cluster lists the fleet's GPU nodes (by its label), each
    reached at its InternalIP with the settings for all, and its own sshd's port as its override,
    with ``knobs`` (node name -> knobs) on top."""
    # a registered node's InternalIP is this machine's (kubelet refuses loopback); its sshd, loopback's
    return _write_nodes_file(nodes, key, path, node_selector=f"{MARK}=true",
                             overrides={n.name: {"ssh_port": n.port, **n.knobs,
                                                 **({"ssh_hostname": "127.0.0.1"} if n.registered else {}),
                                                 **(knobs or {}).get(n.name, {})}
                                        for n in nodes})


def nodes_file(nodes, key: str, path: str, node_names: dict) -> str:
    """The nodes file an operator would write for ``nodes`` (and their known_hosts beside it)."""
    hosts = {f"ssh-{n.name}": {"ssh_hostname": "127.0.0.1", "ssh_port": n.port, **n.knobs,
                               **({"node_name": node_names[n.name]} if n.name in node_names else {})}
             for n in nodes}
    return _write_nodes_file(nodes, key, path, hosts=hosts)


def cluster_objects(nodes, gpus: int = 4) -> str:
    """The fleet's objects: its Nodes (GPUs advertised), RuntimeClasses (one whose handler no
    node loads), a GPU Pod bound to each node, and a toolkit DaemonSet on every fleet node."""
    toleration = [{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}]
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "fleet-nvidia"},
             "handler": "nvidia"},
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "fleet-kata"},
             "handler": "kata"},
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "fleet-aks"},
             "handler": "nvidia-container-runtime"},
            {"apiVersion": "apps/v1", "kind": "DaemonSet",
             "metadata": {"name": "fleet-container-toolkit", "namespace": NAMESPACE},
             "spec": {"selector": {"matchLabels": {"app": "fleet-toolkit"}},
                      "template": {"metadata": {"labels": {"app": "fleet-toolkit"}},
                                   "spec": {"nodeSelector": {MARK: "true"}, "tolerations": toleration,
                                            "containers": [{"name": "toolkit", "image": "toolkit:v1.17.0"}]}}}}]
    for n in nodes:
        if not n.registered:  # a registered node's Node is its kubelet's
            node = labcluster.kwok_node(n.name, labels={MARK: "true"}, capacity={"nvidia.com/gpu": str(gpus)})
            docs.append({**node, "spec": {"taints": [{"key": MARK, "value": "true", "effect": "NoSchedule"}]}})
        gpu = {"name": "cuda", "image": "cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"gpu-{n.name}", "namespace": NAMESPACE},
                     "spec": {"nodeName": n.name, "runtimeClassName": "fleet-nvidia", "tolerations": toleration,
                              "containers": [gpu]}})
        if n.cdi_pod:
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"cdi-{n.name}", "namespace": NAMESPACE},
                         "spec": {"nodeName": n.name, "tolerations": toleration, "containers": [gpu]}})
        if n.aks_pod:
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"aks-{n.name}", "namespace": NAMESPACE},
                         "spec": {"nodeName": n.name, "runtimeClassName": "fleet-aks", "tolerations": toleration,
                                  "containers": [gpu]}})
    return "\n---\n".join(json.dumps(d) for d in docs)


def create_cluster_objects(nodes, gpus: int = 4):
    kubectl("apply", "-f", "-", stdin=cluster_objects(nodes, gpus))
    have = {**labcluster.CAPACITY, "nvidia.com/gpu": str(gpus)}
    for n in nodes:  # reached on loopback, as a node at its InternalIP (its own sshd's port)
        status = {"capacity": have, "allocatable": have,
                  "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": n.name}]}
        if n.registered:  # its kubelet says the rest: GPUs advertised as a device plugin would
            status = {k: {"nvidia.com/gpu": str(gpus)} for k in ("capacity", "allocatable")}
        kubectl("patch", "node", n.name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))
        if n.api_handlers:
            handlers = [{"name": h, "features": {"recursiveReadOnlyMounts": True}} for h in n.api_handlers]
            kubectl("patch", "node", n.name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"runtimeHandlers": handlers}}))


def delete_cluster_objects(nodes):
    # Pods at once, without grace: a registered node's kubelet may be gone, and would never confirm.
    kubectl("delete", "daemonset,pod", "--all", "-n", NAMESPACE, "--grace-period=0", "--force", "--ignore-not-found")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
    kubectl("delete", "runtimeclass", "fleet-nvidia", "fleet-kata", "fleet-aks", "--ignore-not-found")
    if nodes:
        kubectl("delete", "node", *[n.name for n in nodes], "--ignore-not-found")


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
            found[os.path.relpath(p, path)] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777, st.st_size,
                                               st.st_mtime_ns, digest)
    return found


def node_files(node: Node) -> dict:
    """Every file the node's processes may write, read from the host: its /etc/containerd and
    /run as the node sees them, and everything written to its /var/lib and /var/log."""
    root = f"/proc/{ns_pid(node)}/root"
    return {"/etc/containerd": tree(root + "/etc/containerd"), "/run": tree(root + "/run"),
            "/var/lib": tree(os.path.join(node.dir, "varlib", "upper")),
            "/var/log": tree(os.path.join(node.dir, "varlog", "upper"))}


def keypair(root: str) -> tuple:
    key = os.path.join(root, "id_ed25519")
    return key, keygen(key)
