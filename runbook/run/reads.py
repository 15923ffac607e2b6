"""Read once, decide everywhere: a run's reads of the target, batched and reused until a change.

Operations ask for the lab's files, cluster objects and containerd views through here. The first
ask reads the host's whole scope (``declare``) in one round trip: its files and globs, every
object of the kinds the playbook owns or judges in all namespaces, and both containerd views.
Later asks are answered from that read until something changes what it read:
- a file the playbook writes or removes updates the files read in place (it knows what it wrote);
  one beside the containerd config drops the containerd read (a restart's forecast merges them);
- a command that changes the cluster (``cluster_changes``) drops the cluster read;
- a change to the lab containerd (``containerd_changes``: start, stop, drop-ins set aside) drops
  the containerd and files reads;
- a wait drops the cluster and containerd reads (what it waited for has moved).
The next ask reads again only what it needs of what was dropped. Waits never use these reads:
they poll live. Planning and executing keep separate reads, so a plan's guesses never reach a run.
"""

import fnmatch
import posixpath
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.context import ctx_host
from pyinfra.facts.server import Command

from runbook.reach.batch import Batch, PartFailed
from runbook.reach.containerd import ContainerdRestart, LabContainerd
from runbook.reach.files import Files
from runbook.reach.kube import ClusterUnanswered, KubeObjects
from runbook.run.state import run_of

# Every kind the playbook owns, waits on or judges: one `kubectl get` reads them all.
# Leases say whether the scheduler, the controller-manager and each node's agent still work.
CLUSTER_KINDS = "namespaces,nodes,runtimeclasses,pods,daemonsets,configmaps,serviceaccounts,leases"


@dataclass
class _Scope:
    files: tuple  # paths and globs read in one batch
    context: str  # the kube context whose objects are read
    daemon: object  # the lab containerd (runbook.replay.labdaemon.LabDaemon), or None


@dataclass
class _Reads:
    stage: object
    first: bool = True  # nothing read yet in this stage: the first ask reads everything
    files: dict | None = None  # answers for the scope's paths and globs
    cluster: object = None  # list of objects, a ClusterUnanswered, or None (not read)
    containerd: dict | None = None  # {"loaded": ..., "restart": ...}


def _scopes(h) -> dict:
    """What each host's batched read covers, by host name, for this run (``runbook.run.state``)."""
    return run_of(h.state).scopes


def _all_reads(h) -> dict:
    """Each host's batched reads, by host name, for this run."""
    return run_of(h.state).reads


def declare(host, files, context: str, daemon):
    """
    Name what a host's runs read: the lab's files (paths or globs), the kube context, and the lab
    containerd (or None).

    .. code:: python

        declare(host, files=("/root/gpuop/etc/containerd/config.toml", ...), context="", daemon=daemon)
    """
    _scopes(host)[host.name] = _Scope(tuple(files), context, daemon)


def _reads() -> _Reads:
    stage = host.state.current_stage
    reads = _all_reads(host).get(host.name)
    if reads is None or reads.stage != stage:
        reads = _all_reads(host)[host.name] = _Reads(stage)
    return reads


def _fill(want: str):
    """Read what ``want`` needs (and, on the first ask, everything else) in one round trip."""
    reads, scope = _reads(), _scopes(host)[host.name]
    parts = _parts(reads, scope, want)
    if parts:
        _keep(reads, dict(zip(parts, _batch(tuple(parts.values())))))


def _parts(reads: _Reads, scope: _Scope, want: str) -> dict:
    """The batched read's parts for what ``want`` needs ("" for nothing of its own), and, on
    the stage's first ask, for everything the scope names."""
    parts = {}
    if want == "files" or (reads.first and reads.files is None):
        parts["files"] = (Files, {"paths": scope.files})
    if want == "cluster" or (reads.first and reads.cluster is None):
        parts["cluster"] = (
            KubeObjects,
            {"resources": CLUSTER_KINDS, "all_namespaces": True, "context": scope.context, "unanswered_raises": True},
        )
    if scope.daemon and (want == "containerd" or (reads.first and reads.containerd is None)):
        d = scope.daemon
        parts["loaded"] = (LabContainerd, d.loaded_fact_args())
        parts["restart"] = (ContainerdRestart, {"binary": d.binary, "config": d.config})
    reads.first = False
    return parts


def _batch(parts: tuple, first_alone: bool = False) -> list:
    answers = host.get_fact(Batch, parts=parts, first_alone=first_alone)
    if len(answers) != len(parts):
        raise PartFailed(f"{host.name}: the batched read answered {len(answers)} of its {len(parts)} parts")
    return answers


def _keep(reads: _Reads, found: dict):
    """Keep the batched read's answers (by part name); a part that failed raises here."""
    if "files" in found:
        reads.files = _answer(found["files"])
    if "cluster" in found:  # a cluster that does not answer is kept as such, for the caller to say
        cluster = found["cluster"]
        reads.cluster = cluster if isinstance(cluster, ClusterUnanswered) else _answer(cluster)
    if "loaded" in found:
        reads.containerd = {"loaded": _answer(found["loaded"]), "restart": _answer(found["restart"])}


def after(h, command: str) -> str:
    """
    Run ``command`` on host ``h`` and, once it has ended, in the same round trip, the host's
    whole first read (where ``declare`` named what it reads): a run's first act (its lock taken)
    and its first read cost one round trip. Returns the command's output. The read is kept for
    the operations' asks, unless ``forget`` drops it or a part of it failed (the operation that
    asks for it reads it again, and says why).

    .. code:: python

        said = after(host, "mkdir /tmp/gpuop-kwok-gpuop-lab.lock && echo taken || cat ...")
    """
    with ctx_host.use(h):
        scope = _scopes(h).get(h.name)
        reads = _reads()
        parts = _parts(reads, scope, "") if scope and reads.first else {}
        said, *answers = _batch(((Command, {"command": command}), *parts.values()), first_alone=True)
        found = dict(zip(parts, answers))
        if any(isinstance(a, Exception) and not isinstance(a, ClusterUnanswered) for a in found.values()):
            forget(h)
        else:
            _keep(reads, found)
    return "" if isinstance(said, Exception) else said.strip()


def forget(h):
    """Drop all that host ``h``'s run has read in this stage: the next ask reads again."""
    _all_reads(h).pop(h.name, None)


def _answer(value):
    if isinstance(value, Exception):
        raise value
    return value


def _matches(path: str, pattern: str) -> bool:
    directory, name = posixpath.split(pattern)
    return posixpath.dirname(path) == directory and fnmatch.fnmatchcase(posixpath.basename(path), name)


def files(paths) -> dict:
    """
    The lab's files among ``paths`` (globs expanded), as ``Files`` returns them: from the run's
    read when it covers them, else read now.

    .. code:: python

        files(("/root/gpuop/out/rollout.txt", "/root/gpuop/etc/containerd/conf.d/*.toml"))
    """
    paths = tuple(paths)
    scope = _scopes(host).get(host.name)
    if not scope or not all(p in scope.files or any(_matches(p, q) for q in scope.files) for p in paths):
        return host.get_fact(Files, paths=paths)
    reads = _reads()
    if reads.files is None:
        _fill("files")
    return {p: f for p, f in reads.files.items() if any(p == q or _matches(p, q) for q in paths)}


def objects() -> list:
    """
    Every object of ``CLUSTER_KINDS`` in all namespaces of the context ``declare`` named: from the
    run's read, else read now. A
    cluster that does not answer fails the host here, naming kubectl's words, and reads as empty.

    .. code:: python

        [o for o in objects() if o["kind"] == "Node"]
    """
    answer = cluster_answer()
    return _unanswered(answer) if isinstance(answer, ClusterUnanswered) else answer


def cluster_answer():
    """The cluster read as it is: its objects, or the ``ClusterUnanswered`` saying why not."""
    reads = _reads()
    if reads.cluster is None:
        _fill("cluster")
    return reads.cluster


def _unanswered(e: ClusterUnanswered) -> list:
    logger.error(f"{host.print_prefix}the cluster does not answer: {e}")
    host.state.fail_hosts({host})
    return []


def in_scope(kind_plural: str, context: str) -> bool:
    """Whether objects of a kind in a context come with the run's cluster read."""
    scope = _scopes(host).get(host.name)
    return bool(scope) and context == scope.context and kind_plural in CLUSTER_KINDS.split(",")


def containerd() -> dict:
    """The lab containerd's views, ``{"loaded": LabContainerd, "restart": ContainerdRestart}``;
    a host declared without one has ``restart`` None."""
    if _scopes(host)[host.name].daemon is None:
        return {"loaded": LabContainerd.default(), "restart": None}
    reads = _reads()
    if reads.containerd is None:
        _fill("containerd")
    return reads.containerd


def wrote(path: str, text: str, mode: str):
    """A file the playbook wrote (or is about to, when planning): the files read says so."""
    reads = _reads()
    if reads.files is not None and any(path == q or _matches(path, q) for q in _scopes(host)[host.name].files):
        reads.files[path] = {"mode": mode, "text": text}
    _config_touched(reads, path)


def removed(*paths):
    """Files the playbook removes."""
    reads = _reads()
    for path in paths:
        if reads.files is not None:
            reads.files.pop(path, None)
        _config_touched(reads, path)


def _config_touched(reads: _Reads, path: str):
    """A restart's forecast merges the files beside the lab's config: one changed, it is stale."""
    scope = _scopes(host).get(host.name)
    daemon = scope.daemon if scope else None
    if daemon and path.startswith(posixpath.dirname(daemon.config) + "/"):
        reads.containerd = None


def cluster_changes(command):
    """``command`` changes the cluster: the cluster read goes stale. Returns the command."""
    _reads().cluster = None
    return command


def containerd_changes(command):
    """``command`` changes the lab containerd or its drop-ins: those reads go stale."""
    reads = _reads()
    reads.containerd = reads.files = None
    return command


def moved(waiting_host):
    """A wait on ``waiting_host`` ended: what it waited for has moved, so the cluster and
    containerd reads go stale."""
    reads = _all_reads(waiting_host).get(waiting_host.name)
    if reads is not None:
        reads.cluster = reads.containerd = None


def _plural(kind: str) -> str:
    return kind + ("es" if kind.endswith("s") else "s")


def _wanted(resources):
    """``(plural kind, name or None)`` for each resource as ``kubectl get`` takes it."""
    for resource in (resources,) if isinstance(resources, str) else resources:
        if "/" in resource:
            kind, name = resource.split("/", 1)
            yield _plural(kind), name
        else:
            yield from ((kind, None) for kind in resource.split(","))


def found(resources, namespace=None, context="", in_wait=False, all_namespaces=False) -> list:
    """
    Live objects: ``resources`` as ``kubectl get`` takes them (``"nodes"``, ``"pod/cuda-probe"``,
    ``"daemonsets,pods"``, or several), in ``namespace`` (None for cluster-scoped kinds) or in all
    of them. Answered from the run's cluster read when it holds their kinds; read now otherwise,
    and always in a wait (``in_wait``: polled live; a cluster that does not answer raises
    ``ClusterUnanswered``).

    .. code:: python

        found(("namespace/gpu-lab", "serviceaccount/default"), namespace="gpu-lab")
    """
    wanted = list(_wanted(resources))
    if in_wait or not all(in_scope(kind, context) for kind, _ in wanted):
        return host.get_fact(
            KubeObjects,
            resources=resources,
            namespace=namespace,
            context=context,
            all_namespaces=all_namespaces,
            unanswered_raises=in_wait,
        )
    return [
        o
        for o in objects()
        if (all_namespaces or o["metadata"].get("namespace") in (None, namespace))
        and any(_plural(o["kind"].lower()) == kind and name in (None, o["metadata"]["name"]) for kind, name in wanted)
    ]


def live_object(resource, namespace=None, context="", in_wait=False):
    """The live object (``"kind/name"``), or None (see ``found``)."""
    matched = found(resource, namespace, context, in_wait)
    return matched[0] if matched else None
