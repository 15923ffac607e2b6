"""The playbook's knobs: parsed and validated before the first change.

``--data key=value`` hands every value over as a string, group_data as Python values; both go
through the same parsers, and a bad value names the key, the value and what was expected.
"""

import posixpath
import re
from dataclasses import dataclass, fields

from gpuop.judgment.quantity import parse_quantity
from gpuop.layout import Layout

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_IMAGE = re.compile(r"^[a-z0-9]([a-z0-9._/:-]*[a-z0-9])?$")
REACHES = (
    "ssh",
    "cluster",
    "agent",
)  # how a real node is read (knob reach): agent, from its node agent's condition alone
NODES_FROM = ("inventory", "agents")  # which nodes a fleet run takes (knob nodes_from)


class KnobError(ValueError):
    """A knob's value is unusable: which key, what was given, what was expected."""

    def __init__(self, key, value, expected):
        super().__init__(f"knob {key}={value!r}: expected {expected}")
        self.key, self.value, self.expected = key, value, expected


def _int(minimum):
    def parse(key, value):
        if isinstance(value, bool) or not re.fullmatch(r"\s*-?\d+\s*", str(value)):
            raise KnobError(key, value, f"an integer >= {minimum}")
        number = int(value)
        if number < minimum:
            raise KnobError(key, value, f"an integer >= {minimum}")
        return number

    return parse


def _name(key, value):
    if not isinstance(value, str) or not _NAME.match(value) or len(value) > 253:
        raise KnobError(key, value, "a Kubernetes object name (lowercase letters, digits, '-', '.')")
    return value


def _names(key, value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [i.strip() if isinstance(i, str) else i for i in items]
    if not items or any(not i for i in items):
        raise KnobError(key, value, "a non-empty comma-separated list of node names")
    for item in items:
        _name(key, item)
    if len(set(items)) != len(items):
        raise KnobError(key, value, "node names without repeats")
    return tuple(items)


def _quantity(key, value):
    try:
        if parse_quantity(str(value)) <= 0:
            raise ValueError
    except ValueError:
        raise KnobError(key, value, "a positive Kubernetes quantity such as 128Mi or 64Gi") from None
    return str(value)


def _abs_path(key, value):
    if not isinstance(value, str) or not value.startswith("/") or posixpath.normpath(value) == "/":
        raise KnobError(key, value, "an absolute directory path other than /")
    return posixpath.normpath(value)


def _optional_file(key, value):
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not value.startswith("/") or value.endswith("/") or "\0" in value:
        raise KnobError(key, value, "an absolute file path on the lab host, or empty for none")
    return posixpath.normpath(value)


def _tag(key, value):
    if not isinstance(value, str) or not _TAG.match(value):
        raise KnobError(key, value, "an image tag such as v1.17.0")
    return value


def _image(key, value):
    if not isinstance(value, str) or not _IMAGE.match(value) or "@" in value:
        raise KnobError(key, value, "an image repository such as nvcr.io/nvidia/k8s/container-toolkit")
    return value


def _runtimes(key, value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [i.strip() for i in items if i.strip()]
    if not items:
        raise KnobError(key, value, "a comma-separated list of runtime handler names")
    return tuple(items)


def _binary_path(key, value):
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not value.startswith("/") or any(c.isspace() for c in value):
        raise KnobError(key, value, "an absolute path to a binary, or empty for none")
    return posixpath.normpath(value)


def _command(key, value):
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise KnobError(key, value, "a command name or an absolute path, without spaces")
    return value


def _context(key, value):
    if value is None:
        return ""
    if not isinstance(value, str) or any(c.isspace() for c in value):
        raise KnobError(key, value, "a kubeconfig context name, or empty for the current one")
    return value


def _optional_name(key, value):
    return "" if value in (None, "") else _name(key, value)


def _controller_path(key, value):
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or "\0" in value:
        raise KnobError(key, value, "a file path on the machine that runs pyinfra, or empty for none")
    return value


def _nodes_from(key, value):
    if value not in NODES_FROM:
        raise KnobError(
            key,
            value,
            "inventory (the nodes file's hosts, else the cluster's GPU nodes) or agents (of those, "
            "only the ones whose node agent's condition says a gap)",
        )
    return value


def _reach(key, value):
    if value not in REACHES:
        raise KnobError(
            key,
            value,
            f"one of {', '.join(REACHES)} (how a node is read: its SSH, a short-lived Pod on it, or its "
            "node agent's condition)",
        )
    return value


def _image_ref(key, value):
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise KnobError(
            key, value, "an image reference with a shell and nsenter, such as docker.io/library/busybox:1.37"
        )
    return value


def _shell_line(key, value):
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise KnobError(key, value, "one shell command line, such as systemctl restart containerd")
    return value


def _bool(key, value):
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise KnobError(key, value, "true or false")


@dataclass(frozen=True)
class Knobs:
    gpuop_root: str
    lab_nodes: tuple
    gpu_node: str
    gpu_count: int
    timeslice_node: str
    physical_gpus: int
    replicas: int
    vram_per_gpu_gib: int
    toolkit_image: str
    toolkit_version_initial: str
    toolkit_version_upgrade: str
    toolkit_memory_initial: str
    toolkit_memory_upgrade: str
    toolkit_memory_fix: str
    max_unavailable: int
    loaded_runtimes_observed: tuple
    containerd_binary: str
    crictl_binary: str
    nvidia_ctk_binary: str
    kube_context: str
    wait_timeout_s: int
    replay: bool
    kubelet_node: str
    reboot: bool
    textfile: str


PARSERS = {
    "gpuop_root": _abs_path,
    "lab_nodes": _names,
    "gpu_node": _name,
    "gpu_count": _int(1),
    "timeslice_node": _name,
    "physical_gpus": _int(1),
    "replicas": _int(1),
    "vram_per_gpu_gib": _int(1),
    "toolkit_image": _image,
    "toolkit_version_initial": _tag,
    "toolkit_version_upgrade": _tag,
    "toolkit_memory_initial": _quantity,
    "toolkit_memory_upgrade": _quantity,
    "toolkit_memory_fix": _quantity,
    "max_unavailable": _int(1),
    "loaded_runtimes_observed": _runtimes,
    "containerd_binary": _binary_path,
    "crictl_binary": _command,
    "nvidia_ctk_binary": _command,
    "kube_context": _context,
    "wait_timeout_s": _int(1),
    "replay": _bool,
    "kubelet_node": _optional_name,
    "reboot": _bool,
    "textfile": _optional_file,
}


@dataclass(frozen=True)
class DrainPolicy:
    """How the fleet repair takes a node's Pods off it before its runtime restarts, as ``kubectl
    drain --ignore-daemonsets`` does: one object, built once from the knobs
    (``NodeKnobs.drain_policy``), printed by the plan and obeyed by the drain.

        DrainPolicy(drain=True, delete_unmanaged=False, delete_emptydir_data=False, timeout_s=300)
    """

    drain: bool = True  # knob drain: false cordons only, every Pod runs on through the restart
    delete_unmanaged: bool = False  # knob drain_unmanaged: Pods no controller owns deleted (--force)
    delete_emptydir_data: bool = False  # knob drain_delete_emptydir_data (--delete-emptydir-data)
    timeout_s: int = 300  # knob drain_timeout_s: the evictions and the Pods' ends within it


@dataclass(frozen=True)
class NodeKnobs:
    node_name: str
    gpu_handler: str
    gpu_driver: str
    crictl_binary: str
    kube_context: str
    kubeconfig: str
    report: str
    textfile: str
    node_read_timeout_s: int
    cluster_read_timeout_s: int
    reach: str
    nodes_from: str
    agent_heartbeat_s: int
    node_pod_image: str
    node_pod_namespace: str
    containerd_restart: str
    crio_restart: str
    drain: bool
    drain_unmanaged: bool
    drain_delete_emptydir_data: bool
    drain_timeout_s: int
    restart_timeout_s: int
    repair_max_unavailable: int
    repair_max_failures: int
    repair_lock_s: int

    @property
    def drain_policy(self) -> DrainPolicy:
        """The drain's knobs as one object."""
        return DrainPolicy(
            drain=self.drain,
            delete_unmanaged=self.drain_unmanaged,
            delete_emptydir_data=self.drain_delete_emptydir_data,
            timeout_s=self.drain_timeout_s,
        )


NODE_PARSERS = {
    "node_name": _optional_name,
    "gpu_handler": _name,
    "gpu_driver": _name,
    "crictl_binary": _command,
    "kube_context": _context,
    "kubeconfig": _controller_path,
    "report": _controller_path,
    "textfile": _controller_path,
    "node_read_timeout_s": _int(10),
    "cluster_read_timeout_s": _int(5),
    "reach": _reach,
    "nodes_from": _nodes_from,
    "agent_heartbeat_s": _int(10),
    "node_pod_image": _image_ref,
    "node_pod_namespace": _name,
    "containerd_restart": _shell_line,
    "crio_restart": _shell_line,
    "drain": _bool,
    "drain_unmanaged": _bool,
    "drain_delete_emptydir_data": _bool,
    "drain_timeout_s": _int(1),
    "restart_timeout_s": _int(1),
    "repair_max_unavailable": _int(1),
    "repair_max_failures": _int(0),
    "repair_lock_s": _int(3),
}


def parse_node_knobs(data) -> NodeKnobs:
    """A real node's knobs from host data, parsed (see ``NODE_PARSERS``).

    parse_node_knobs({"node_name": "gpu-a", "gpu_handler": "nvidia", ...}).node_name -> "gpu-a"
    """
    return NodeKnobs(**{f.name: NODE_PARSERS[f.name](f.name, data.get(f.name)) for f in fields(NodeKnobs)})


SOCKET_PATH_MAX = 104  # what containerd accepts for a unix socket's path
WAIT_MARGIN_S = 60  # a wait's own end, a daemon's stop grace and its last probe, within _timeout


# A knob renamed keeps its old name for a user who types it: old -> new.
RENAMED = {"real_node": "kubelet_node"}


def renamed(data) -> list:
    """One notice per renamed knob that ``data`` still sets by its old name (``parse_knobs``
    takes its value where the new name is unset).

        renamed({"real_node": "lab-node-0"}) -> ["knob real_node is now kubelet_node: ..."]
    """
    return [
        f"knob {old} is now {new} (the lab node a real kubelet runs); taken as {new}={data.get(old)}"
        for old, new in RENAMED.items()
        if data.get(old)
    ]


def parse_knobs(data) -> Knobs:
    """Every knob from host data (``data.get(key)``), parsed and cross-checked.

    parse_knobs({"gpuop_root": "/root/gpuop", "replicas": "5", ...}).replicas -> 5
    """
    values = {}
    old = {new: data.get(o) for o, new in RENAMED.items() if data.get(o)}
    for field in fields(Knobs):
        raw = data.get(field.name) or old.get(field.name, data.get(field.name))
        if raw is None and field.name not in ("kube_context", "containerd_binary", "kubelet_node", "textfile"):
            raise KnobError(field.name, raw, "a value (set in group_data/all.py or with --data)")
        values[field.name] = PARSERS[field.name](field.name, raw)
    for key in ("gpu_node", "timeslice_node"):
        if values[key] not in values["lab_nodes"]:
            raise KnobError(key, values[key], f"one of lab_nodes ({','.join(values['lab_nodes'])})")
    if values["kubelet_node"] and values["kubelet_node"] != values["gpu_node"]:
        raise KnobError(
            "kubelet_node",
            values["kubelet_node"],
            f"empty, or gpu_node ({values['gpu_node']}): the kubelet node is where the GPU Pod goes",
        )
    if values["kubelet_node"] and not values["containerd_binary"]:
        raise KnobError(
            "kubelet_node",
            values["kubelet_node"],
            "empty while containerd_binary is empty: the kubelet node runs on the lab containerd",
        )
    if values["reboot"] and not values["kubelet_node"]:
        raise KnobError(
            "reboot", values["reboot"], "false unless kubelet_node is set: only the kubelet node shows a reboot"
        )
    if values["gpu_node"] == values["timeslice_node"]:
        raise KnobError("timeslice_node", values["timeslice_node"], "a node other than gpu_node")
    socket = Layout(values["gpuop_root"]).containerd_socket + ".ttrpc"  # the longest the daemon binds
    if values["containerd_binary"] and len(socket.encode()) > SOCKET_PATH_MAX:
        raise KnobError(
            "gpuop_root",
            values["gpuop_root"],
            f"a root short enough for the lab containerd's sockets ({socket} is "
            f"{len(socket.encode())} bytes; a unix socket path has at most {SOCKET_PATH_MAX})",
        )
    deadline = data.get("_timeout")  # pyinfra's own: it ends an operation's wait too
    if deadline and values["wait_timeout_s"] > int(deadline) - WAIT_MARGIN_S:
        raise KnobError(
            "wait_timeout_s",
            values["wait_timeout_s"],
            f"at most _timeout - {WAIT_MARGIN_S} ({int(deadline) - WAIT_MARGIN_S}): pyinfra "
            f"ends any command of an operation after _timeout={deadline}s, a wait included",
        )
    return Knobs(**values)
