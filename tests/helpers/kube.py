"""Helpers for tests against the real lab cluster: the kubernetes client and kubectl.

The test's own reads and its setup (``get``, ``set_gpus``, ``reset_lab``) go through one
in-process client, as fast as a request; ``kubectl`` stays where a test plays the operator."""

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from datetime import UTC, datetime

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.leases import stalled_components
from tests.helpers import LAB
from tests.helpers.proc import run

LAB_NODES = ("lab-node-0", "lab-node-1", "lab-node-2")
GPU = "nvidia.com/gpu"
REQUEST_TIMEOUT_S = 30  # one request of the test's own; a stalled API server fails the test

# kubectl's resource names the tests use -> (API prefix, plural, namespaced)
_RESOURCES = {
    "pod": ("/api/v1", "pods", True),
    "node": ("/api/v1", "nodes", False),
    "namespace": ("/api/v1", "namespaces", False),
    "configmap": ("/api/v1", "configmaps", True),
    "event": ("/api/v1", "events", True),
    "runtimeclass": ("/apis/node.k8s.io/v1", "runtimeclasses", False),
    "daemonset": ("/apis/apps/v1", "daemonsets", True),
    "lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "poddisruptionbudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "validatingadmissionpolicybinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}
_RESOURCES.update({where[1]: where for where in list(_RESOURCES.values())})  # "pods" as "pod"
_clients = {}  # context -> (the kubeconfig's mtime and size when made, its client)


def kubeconfig_path() -> str:
    """The kubeconfig the tests use: ``$KUBECONFIG``'s (the lab beside's has its own), else kubectl's default."""
    return os.path.expanduser(os.environ.get("KUBECONFIG") or "~/.kube/config")


def token_kubeconfig(token: str, path: str) -> str:
    """A kubeconfig at ``path`` with only ``token`` for credentials (no client certificate beside
    it), for the current context's API server and CA: a ServiceAccount's view of the cluster."""
    raw = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "token",
        "clusters": [{"name": "lab", "cluster": raw["clusters"][0]["cluster"]}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "lab", "user": "token"}}],
    }
    with open(path, "w") as f:
        json.dump(kubeconfig, f)
    return path


def api_client(context=None) -> client.ApiClient:
    """The client of ``context`` (None: the current one), made anew when the kubeconfig changed
    (a lab recreated has new certificates; ``lab-up`` makes its context current)."""
    path = kubeconfig_path()
    st = os.stat(path)
    stamp, api = _clients.get(context, (None, None))
    if stamp != (st.st_mtime_ns, st.st_size):
        if api is not None:
            api.close()
        api = config.new_client_from_config(config_file=path, context=context)
        _clients[context] = ((st.st_mtime_ns, st.st_size), api)
    return api


def request(
    method, path, body=None, context=None, content_type="application/json", query=None, timeout_s=REQUEST_TIMEOUT_S
):
    """One API request of the test's own: the response's JSON; None where a GET or DELETE finds
    nothing (404). Any other refusal fails the test with the server's words."""
    api = api_client(context)
    try:
        answer = api.call_api(
            path,
            method,
            query_params=list((query or {}).items()),
            body=body,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout_s,
        )
    except ApiException as e:
        if e.status == 404 and method in ("GET", "DELETE"):
            return None
        raise AssertionError(f"{method} {path} failed: {e.status} {e.reason}: {e.body}") from None
    return json.loads(answer.data)


def apiserver_series(context=None) -> dict:
    """The API server's own counters that say its load (its ``/metrics``): requests by (verb,
    resource, subresource, scope) from ``apiserver_request_total`` (the resource paths only, not
    this very ``/metrics``), the watches open by resource (``apiserver_longrunning_requests``),
    its CPU seconds and resident bytes, and when they were read (``time.monotonic()``).

        apiserver_series()["requests"][("LIST", "pods", "", "cluster")] -> 12.0
    """
    answer = api_client(context).call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
    )
    text, at = answer.data.decode(), time.monotonic()
    requests, watches = {}, {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in ("apiserver_request_total", "apiserver_longrunning_requests"):
            continue
        labels, value = dict(re.findall(r'(\w+)="([^"]*)"', rest)), float(line.rsplit(" ", 1)[1])
        if name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH":
            watches[labels["resource"]] = watches.get(labels["resource"], 0) + value
        elif name == "apiserver_request_total" and labels.get("resource"):
            key = (labels["verb"], labels["resource"], labels.get("subresource", ""), labels.get("scope", ""))
            requests[key] = requests.get(key, 0) + value
    cpu = float(re.search(r"^process_cpu_seconds_total (\S+)$", text, re.M).group(1))
    rss = float(re.search(r"^process_resident_memory_bytes (\S+)$", text, re.M).group(1))
    return {"requests": requests, "watches": watches, "cpu": cpu, "rss": rss, "at": at}


def path_of(resource, namespace=None) -> str:
    """``pod/cuda-probe`` in ``gpu-lab`` -> ``/api/v1/namespaces/gpu-lab/pods/cuda-probe``;
    ``pods`` -> the list's path."""
    kind, _, name = resource.partition("/")
    prefix, plural, namespaced = _RESOURCES[kind]
    where = f"/namespaces/{namespace or 'default'}" if namespaced else ""
    return f"{prefix}{where}/{plural}" + (f"/{name}" if name else "")


def core(context=None) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(context))


def apps(context=None) -> client.AppsV1Api:
    return client.AppsV1Api(api_client(context))


def kubectl(*args, context=None, check=True, stdin=None, timeout_s=120) -> str:
    pinned = ["--context", context] if context else []
    result = run(["kubectl", *pinned, *args], timeout_s=timeout_s, stdin=stdin)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def get(resource, namespace=None, context=None, **query):
    """The live object (``pod/cuda-probe``) or list (``pods``) as the API returns it, None when
    absent; ``query``: the list's parameters (``fieldSelector=...``)."""
    return request("GET", path_of(resource, namespace), context=context, query=query)


def eventually(what, probe, timeout=60.0, interval=0.2):
    """Poll ``probe()`` until it returns something truthy; fail naming what and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if seen:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last seen: {seen!r}")
        time.sleep(interval)


def set_gpus(node, count, context=None):
    value = None if count is None else str(count)
    patch = {"status": {"capacity": {GPU: value}, "allocatable": {GPU: value}}}
    request("PATCH", path_of(f"node/{node}") + "/status", patch, context, "application/merge-patch+json")


def reset_lab(context=None, extra_namespaces=()):
    """The lab as `make lab-up` leaves it: no incident objects, no GPU advertisements."""
    namespaces = ("gpu-lab", "gpu-operator", *extra_namespaces)
    # Workloads first, without grace (no kubelet would honour it), then the namespaces together:
    # the namespace controller alone takes seconds per namespace.
    now = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
    for ns in namespaces:
        for kind in ("daemonsets", "pods"):
            request("DELETE", path_of(kind, ns), now, context)
    for ns in namespaces:
        request("DELETE", path_of(f"namespace/{ns}"), context=context)
    request("DELETE", path_of("runtimeclass/nvidia"), context=context)
    for node in LAB_NODES:
        set_gpus(node, None, context)
    eventually(
        f"namespaces {', '.join(namespaces)} gone",
        lambda: not any(get(f"namespace/{ns}", context=context) for ns in namespaces),
        timeout=120,
    )


def component_pidfile(component: str) -> str:
    """Where kwokctl keeps the pid of one of the lab's control-plane processes."""
    return os.path.expanduser(f"~/.kwok/clusters/{LAB}/pids/{component}.pid")


def kill_component(component: str, sig=signal.SIGKILL) -> int:
    """Kill one control-plane process of the lab (``kube-apiserver``, ``etcd``...); its pid."""
    with open(component_pidfile(component)) as f:
        pid = int(f.read())
    os.kill(pid, sig)
    return pid


def api_ready() -> bool:
    return run(["kubectl", "get", "--raw", "/readyz", "--request-timeout=3s"], timeout_s=10).returncode == 0


def exited(pid: int) -> bool:
    """Whether a process is gone (or a zombie: exited, not yet reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@contextlib.contextmanager
def etcd_stopped():
    """The lab's etcd stopped for the block, then started again as it was (same command line,
    data directory and log), as an operator restarting it would; its new pid goes where kwokctl
    looks for it. Leaves once the API server is ready again; heals nothing."""
    with open(component_pidfile("etcd")) as f:
        pid = int(f.read())
    argv = open(f"/proc/{pid}/cmdline", "rb").read().rstrip(b"\0").split(b"\0")
    cwd = os.readlink(f"/proc/{pid}/cwd")
    os.kill(pid, signal.SIGTERM)
    eventually(f"etcd pid {pid} to exit", lambda: exited(pid))
    try:
        yield
    finally:
        with open(os.path.expanduser(f"~/.kwok/clusters/{LAB}/logs/etcd.log"), "ab") as log:
            started = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=log, start_new_session=True)
        with open(component_pidfile("etcd"), "w") as f:
            f.write(str(started.pid))
    eventually("the API server ready after the etcd restart", api_ready, timeout=60)


def restart_etcd():
    """Restart the lab's etcd (``etcd_stopped``) and return once the cluster works again: a
    controller that could not renew its lease meanwhile exits (a loaded machine makes that
    likely), and would leave namespaces undeleted for the tests after this one, so `make lab-up`
    starts it again, whatever the restart did."""
    stopped_at = int(time.time())
    try:
        with etcd_stopped():
            pass
    finally:
        lab_up(disturbed_at=stopped_at)


COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller")


def component_fault(component: str) -> str | None:
    """Why one of the lab's control-plane processes does not run ("not running", "stopped"), as
    lab/lab.sh judges it: kwokctl's pid file names a live process of the component's own binary
    (a pid file outlives its process, a pid is reused). None where it runs."""
    try:
        with open(component_pidfile(component)) as f:
            pid = int(f.read())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0].decode()
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return "not running"
    if os.path.basename(argv0) != component or state == "Z":
        return "not running"
    return "stopped (SIGSTOP)" if state == "T" else None


def control_plane_faults() -> list:
    """What of the lab's control plane does not work, in words (empty: all of it works): a
    process gone or stopped, an API server that does not answer, a controller whose leader lease
    is not held and fresh (the lab's own rule: lab/labcluster.py). One request: it runs before
    every test of the lab's cluster (tests/conftest.py)."""
    faults = [f"{c}: {why}" for c in COMPONENTS if (why := component_fault(c))]
    if faults:
        return faults
    try:
        leases = request("GET", path_of("leases", "kube-system"), context=f"kwok-{LAB}", timeout_s=5)
    except Exception as e:  # noqa: BLE001 (a refusal, a timeout or a connection error alike: the API is not whole)
        return [f"kube-apiserver: no answer about the leases ({type(e).__name__}: {str(e)[:200]})"]
    return stalled_components(
        [{**lease, "kind": "Lease"} for lease in leases["items"]], [], datetime.now(UTC), held=True
    )


def heal_lab() -> str:
    """`lab/lab.sh heal`: every stopped component of the lab's control plane started again and
    its controllers holding fresh leases, its nodes as they are; what it said."""
    env = {**os.environ, "LAB_DISTURBED_AT": str(int(time.time()))}
    result = run(["lab/lab.sh", "heal", LAB], timeout_s=300, env=env)
    assert result.returncode == 0, f"lab/lab.sh heal {LAB} failed: {result.stderr}"
    return result.stderr


def lab_up(disturbed_at=None):
    """`make lab-up`: the lab cluster running again, whatever of it stopped; ``disturbed_at``
    (seconds since the epoch): when a component was disturbed from outside, so that the
    controllers count as working only once they renewed their leases after it."""
    env = {**os.environ, "LAB_DISTURBED_AT": str(disturbed_at)} if disturbed_at else None
    result = run(["lab/lab.sh", "up", LAB], timeout_s=300, env=env)
    assert result.returncode == 0, result.stderr
