"""The view's type (``View``): one node's runtime as every rule reads it, each field said once;
``gpuop.judgment.view`` makes it for each kind of target."""

from typing import TypedDict


class Daemon(TypedDict, total=False):
    """The runtime daemon that serves the node."""

    pid: int
    exe: str  # the process's own binary, as /proc names it
    config: str  # its main config file
    config_dir: str  # CRI-O: its drop-in directory
    address: str  # its CRI socket
    binary: str  # the binary asked for its merge and version (k3s's containerd beside its multicall)
    started: int | None  # when it started (epoch seconds); None: not known


class Other(TypedDict):
    """A runtime daemon beside the one that serves."""

    pid: int
    config: str
    address: str
    runtime: str  # "containerd" or "cri-o"


class Cdi(TypedDict):
    """CDI as the daemon holds it."""

    enabled: bool
    spec_dirs: list  # the directories it reads CDI specs from
    gpu_specs: list  # the spec files there of nvidia.com/gpu devices


class View(TypedDict):
    """One node's runtime, the one shape every rule reads (``unknown_view`` makes every field).

    Three views of the handlers: ``written`` (the files), ``loaded`` (the running daemon) and
    ``after_restart`` (what its next start would load, by the binary's own merge), beside what
    is scheduled (the cluster's objects, read apart).
    """

    runtime: str  # "containerd" or "cri-o"
    version: str  # its release ("1.6.20"); "unknown": not read; "none": no runtime runs
    daemon: Daemon | None  # the one that serves; None where none runs (or none was found)
    others: list[Other]  # the node's other runtime daemons
    kubelet_endpoint: str | None  # the kubelet's --container-runtime-endpoint; None: no kubelet read
    written: list  # the handlers its files define ("runc", "nvidia")
    dropins: list  # the drop-in files its imports reach
    unreached: list  # TOML files in conf.d that no import reaches
    config_errors: list  # why a file could not be read or parsed, in words
    imports: list  # the main config's imports globs, resolved
    versions: dict  # each file's top-level config version, by path
    regenerated: dict | None  # k3s or RKE2 writes the config anew at start: gpuop.judgment.regen's answer
    loaded: list  # the handlers the running daemon holds
    loaded_from: str  # where "loaded" comes from (below)
    cri_error: str  # why CRI did not answer, in its words
    default_runtime: str  # the handler a Pod with no RuntimeClass gets
    cdi: Cdi | None  # None: not known
    gpu_hooks: list  # CRI-O: OCI hook files that hand every container its GPUs
    after_restart: list  # the handlers its next start would load
    cri_after_restart: str  # "ok" | "fails" | "refuses-start" | "unknown"
    restart_reason: str  # why, in the binary's own words
    restart_from: str  # what was asked ("containerd 1.6.20's own merge of the files")
    unread: dict  # a real node's read: its sections that did not end in time, each with its deadline
    driver: dict | None  # the node's NVIDIA driver (gpuop.judgment.driver's facts); None: not read
