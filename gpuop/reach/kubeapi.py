"""The operator's kubeconfig on this machine, as a client of the kubernetes library: the fleet
audit's cluster read and its reads through a node's Pod (``runbook.reach.kubenode``). Only they
import this module: the lab's runs never load the kubernetes client (a second to import)."""

import os
import time

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.cluster import SANDBOX_FAILED

CONNECT_TIMEOUT_S = 5  # a connection to the API server: one that accepts and then stalls ends here
PAGE = 500  # objects per list request


class ClusterUnreadable(Exception):
    """The cluster could not be read: which kubeconfig and context, and why, in one sentence."""


def where(kubeconfig: str, context: str) -> str:
    """The cluster a kubeconfig and context name, in words.

    where("", "prod") -> "kubeconfig ~/.kube/config, context prod"
    """
    return (
        f"kubeconfig {kubeconfig or os.environ.get('KUBECONFIG') or '~/.kube/config'}, context {context or '(current)'}"
    )


def api_client(kubeconfig: str, context: str, request_deadline_s: float = 0) -> client.ApiClient:
    """A client of ``context`` (empty: the current one) in ``kubeconfig`` (empty: $KUBECONFIG or
    ~/.kube/config) that never retries: each request's deadline is its caller's, or, given
    ``request_deadline_s``, that for every request that names none (a stalled API server then
    fails the request instead of holding the run).

        api_client("", "prod", request_deadline_s=20)  # raises ConfigException for a context the file lacks
    """
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig or None, context=context or None, client_configuration=configuration)
    return bounded(configuration, request_deadline_s)


def bounded(configuration: client.Configuration, request_deadline_s: float = 0) -> client.ApiClient:
    """A client of ``configuration`` that never retries, each request under its caller's deadline
    or, given ``request_deadline_s``, under that one where it names none.

        bounded(in_cluster_configuration, 10)   # the node agent's, in its Pod
    """
    configuration.retries = False
    api = client.ApiClient(configuration)
    if request_deadline_s:
        request = api.rest_client.request  # every verb of the client goes through it

        def deadlined(*args, **kwargs):
            if not kwargs.get("_request_timeout"):
                kwargs["_request_timeout"] = (CONNECT_TIMEOUT_S, request_deadline_s)
            return request(*args, **kwargs)

        api.rest_client.request = deadlined
    return api


def plain(api: client.ApiClient, obj, kind: str = "") -> dict:
    """An object of the kubernetes library as the API server's JSON says it (what the rules read),
    its ``kind`` set where given (a list's items carry none).

        plain(api, core.read_node("gpu-a"), "Node")["metadata"]["name"] -> "gpu-a"
    """
    said = api.sanitize_for_serialization(obj)
    return {**said, "kind": kind} if kind else said


def in_words(e: Exception, deadline_s: float) -> str:
    """Why a request to the API server failed, in one sentence (no client's retry chatter).

    in_words(ApiException(status=403, reason="Forbidden"), 20) -> "the API server refused: 403 Forbidden"
    """
    if isinstance(e, ApiException):
        return f"the API server refused: {e.status} {e.reason}"
    if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason is not None:
        e = e.reason
    if isinstance(e, urllib3.exceptions.ConnectTimeoutError):
        return f"the API server did not complete a connection within {CONNECT_TIMEOUT_S}s (it accepts, then stalls)"
    if isinstance(e, (urllib3.exceptions.TimeoutError, TimeoutError)):
        return f"the API server gave no answer within the read's {deadline_s}s"
    if isinstance(e, urllib3.exceptions.NewConnectionError):
        return f"the API server cannot be reached: {str(e).rsplit(': ', 1)[-1]}"
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


# The kinds the findings join, each one list request: one read of the cluster, whatever its size.
_LISTS = (
    ("Node", "CoreV1Api", "list_node"),
    ("RuntimeClass", "NodeV1Api", "list_runtime_class"),
    ("Pod", "CoreV1Api", "list_pod_for_all_namespaces"),
    ("DaemonSet", "AppsV1Api", "list_daemon_set_for_all_namespaces"),
    # DRA (resource.k8s.io/v1, Kubernetes 1.34+): which devices each claim was allocated, and
    # the devices each node publishes; a cluster that serves no v1 is read without them
    ("ResourceClaim", "ResourceV1Api", "list_resource_claim_for_all_namespaces"),
    ("ResourceSlice", "ResourceV1Api", "list_resource_slice"),
    # the kubelets' own word on a sandbox that fails (gpuop.judgment.sandbox.kubelet_agrees)
    ("Event", "CoreV1Api", "list_event_for_all_namespaces"),
)
# What the API server selects for a kind, beside the label selector of the Nodes.
_FIELDS = {"Event": f"reason={SANDBOX_FAILED}"}
DRA_KINDS = ("ResourceClaim", "ResourceSlice")


def read_cluster(
    kubeconfig: str, context: str, deadline_s: float, page: int = PAGE, node_selector: str = "", kinds: tuple = ()
) -> tuple:
    """Every Node (those ``node_selector`` selects: a label selector as kubectl's ``-l`` takes it,
    set-based terms included, judged by the API server), RuntimeClass, Pod, DaemonSet,
    ResourceClaim and ResourceSlice of the cluster, and the Events of sandboxes that failed, as plain JSON (the API's
    own
    field names, ``kind`` set), read from the operator's kubeconfig and context on this machine,
    ``page`` objects per list request (the API's chunking, as kubectl's default: a large
    cluster's Pods are never one answer), within ``deadline_s`` for the whole read (no retries:
    a stalled API server ends the read at its deadline); and how the read went (``dra``: "read",
    or why not: a cluster before Kubernetes 1.34 serves no ``resource.k8s.io/v1``). ``kinds``: those
    kinds alone (the agent reach's fleet rules); empty: every one.

        read_cluster("", "prod-east", 20)[0][0]["kind"] -> "Node"
    """
    started = time.monotonic()
    dra = "read"
    try:
        objects, requests = [], 0
        with api_client(kubeconfig, context) as api:
            for kind, group, method in (k for k in _LISTS if not kinds or k[0] in kinds):
                token = None
                while True:
                    left = max(0.1, deadline_s - (time.monotonic() - started))
                    selected = {"label_selector": node_selector} if kind == "Node" and node_selector else {}
                    selected.update({"field_selector": _FIELDS[kind]} if kind in _FIELDS else {})
                    try:
                        answer = getattr(getattr(client, group)(api), method)(
                            limit=page,
                            _continue=token,
                            _request_timeout=(min(CONNECT_TIMEOUT_S, left), left),
                            **selected,
                        )
                    except ApiException as e:
                        if kind not in DRA_KINDS or e.status != 404:
                            raise
                        requests += 1
                        dra = "not served (no resource.k8s.io/v1: Kubernetes before 1.34)"
                        break
                    requests += 1
                    objects += [plain(api, item, kind) for item in answer.items]
                    token = answer.metadata._continue
                    if not token:
                        break
    except Exception as e:  # noqa: BLE001 (a missing file, a bad context, a refused or stalled API server)
        raise ClusterUnreadable(
            f"the cluster cannot be read ({where(kubeconfig, context)}): {in_words(e, deadline_s)}"
        ) from None
    return objects, {
        "from": where(kubeconfig, context),
        "requests": requests,
        "reads": 1,
        "seconds": round(time.monotonic() - started, 3),
        "dra": dra,
    }


# The read the inventory made to list the GPU nodes (nodes.py), by (kubeconfig, context): the
# run's one read of that cluster, which the audit of each node then judges.
_LISTED = {}


def read_for_inventory(kubeconfig: str, context: str, deadline_s: float, node_selector: str = "") -> tuple:
    """The cluster's objects, read for the inventory (to list its GPU nodes, to take the nodes
    their agents flag) and kept as the run's read (``inventory_read``): read once a run, asked
    again it is that read; and where they were read from, in words.

        read_for_inventory("", "prod", 20, "pool=gpu")[1] -> "kubeconfig ~/.kube/config, context prod"
    """
    if (kubeconfig, context) not in _LISTED:
        _LISTED[(kubeconfig, context)] = read_cluster(kubeconfig, context, deadline_s, node_selector=node_selector)
    objects, how = _LISTED[(kubeconfig, context)]
    return objects, how["from"]


def inventory_read(kubeconfig: str, context: str) -> tuple | None:
    """The inventory's read of that cluster in this run, ``(objects, how)``, or None."""
    return _LISTED.get((kubeconfig, context))
