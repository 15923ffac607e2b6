"""The probe Pod: a Pod of the handler's RuntimeClass bound to one node, past its cordon, that
proves the runtime there gives a container what the node's GPU Pods ask (the handler, its GPUs by
the device plugin or a DRA claim); what a killed run left of it removed by the next.

    probe(api, "gpu-a", "nvidia", "busybox", "default", 120, print)   # Stalled: the sandbox refused, in its words
"""

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop.judgment.cluster import GPU
from gpuop.judgment.containerd import in_one_line
from gpuop.reach.kubeapi import plain
from gpuop.repair.drain import Stalled, wait

PROBE_LABEL = "gpuop.io/probe-node"  # the node a probe Pod proves: the next run removes what a killed one left


def probe_manifest(
    node: str, runtime_class: str, image: str, namespace: str, deadline_s: float, gpus: int = 0, claim: str = ""
) -> dict:
    """The probe Pod: RuntimeClass ``runtime_class``, bound to ``node`` past its cordon and taints,
    one command. ``gpus``: it asks that many ``nvidia.com/gpu`` (the device plugin's allocation);
    ``claim``: it uses that ResourceClaim (DRA), and is then left to the scheduler, which alone
    allocates a claim, pinned to ``node`` by affinity.

        probe_manifest("gpu-a", "nvidia", "busybox", "default", 120, claim="gpuop-probe-x")["spec"]["resourceClaims"]
        -> [{"name": "gpu", "resourceClaimName": "gpuop-probe-x"}]
    """
    asks = (
        {"resources": {"limits": {GPU: str(gpus)}}}
        if gpus
        else {"resources": {"claims": [{"name": "gpu"}]}}
        if claim
        else {}
    )
    placed = (
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            },
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
        }
        if claim
        else {"nodeName": node}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "gpuop-probe-",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpuop", PROBE_LABEL: node},
        },
        "spec": {
            **placed,
            "runtimeClassName": runtime_class,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "activeDeadlineSeconds": int(deadline_s) + 30,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/sh", "-c", "true"],
                    **asks,
                }
            ],
        },
    }


# The kubelet's words that it will not run the probe: its sandbox refused, or the DRA driver's
# preparation of the claimed device failed.
PROBE_REFUSED = ("FailedCreatePodSandBox", "FailedPrepareDynamicResources")


def probe(
    api: client.ApiClient,
    node: str,
    runtime_class: str,
    image: str,
    namespace: str,
    deadline_s: float,
    say,
    gpus: int = 0,
    api_retry_s: float = 0,
    device_class: str = "",
):
    """A probe Pod (``probe_manifest``) runs its one command to the end on ``node``: its sandbox
    started, through the handler. ``gpus``: it asks that many GPUs of the device plugin;
    ``device_class``: it claims one device of that DeviceClass (DRA) through a ResourceClaim of
    its own, made for it. Both deleted after, whatever happened; ``Stalled`` names the kubelet's
    own event where it did not run. ``api_retry_s``: an API server away meanwhile is asked again.
    """
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    labels = {"app.kubernetes.io/managed-by": "gpuop", PROBE_LABEL: node}
    claim = ""
    if device_class:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"generateName": "gpuop-probe-", "namespace": namespace, "labels": labels},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}},
        }
        claim = created(
            f"the probe's ResourceClaim of DeviceClass {device_class}",
            lambda: resource.create_namespaced_resource_claim(namespace, body),
            deadline_s,
            say,
            api_retry_s,
        )
    try:
        manifest = probe_manifest(node, runtime_class, image, namespace, deadline_s, gpus, claim)
        name = created(
            f"the probe Pod for {node}",
            lambda: core.create_namespaced_pod(namespace, manifest),
            deadline_s,
            say,
            api_retry_s,
        )
        words = f"probe Pod {namespace}/{name} (RuntimeClass {runtime_class})"
        try:
            wait(
                f"{words} to run on {node}",
                _ran(api, namespace, name, f"{words} on {node}"),
                deadline_s,
                say,
                api_retry_s,
            )
        finally:
            _deleted(lambda: core.delete_namespaced_pod(name, namespace, grace_period_seconds=0))
    finally:
        if claim:
            _deleted(lambda: resource.delete_namespaced_resource_claim(claim, namespace))


def _ran(api: client.ApiClient, namespace: str, name: str, probe_words: str):
    """The probe wait's check: whether Pod ``name`` ran (Succeeded or Running), else its phase and
    last event; ``Stalled`` on the kubelet's refusal (``PROBE_REFUSED``), said with ``probe_words``."""
    core = client.CoreV1Api(api)

    def ran():
        pod = plain(api, core.read_namespaced_pod(name, namespace))
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Running"):
            return True, phase
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        failed = [e.message for e in events if e.reason in PROBE_REFUSED]
        # the kubelet not reaching its runtime yet (its connection backs off after an outage)
        # is no word on the handler: it tries the sandbox again, and the wait goes on
        if failed and "code = Unavailable" not in failed[-1]:
            raise Stalled(f"{probe_words}: no sandbox: {in_one_line(failed[-1])}")
        last = max(
            events,
            key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
            default=None,
        )
        return False, f"phase {phase}" + (
            f", its last event {last.reason}: {in_one_line(last.message or '')}" if last else ""
        )

    return ran


def created(what: str, create, deadline_s: float, say, api_retry_s: float) -> str:
    """The name of the object ``create()`` made, asked again while the API server is away."""
    return wait(f"{what} created", lambda: (create().metadata.name, ""), deadline_s, say, api_retry_s)


def _deleted(delete):
    """``delete()``, where the object may be gone already (its deadline ends a probe Pod otherwise)."""
    try:
        delete()
    except ApiException:
        pass


def device_class_of(api: client.ApiClient, driver: str) -> str:
    """The DeviceClass a probe claims a device of ``driver`` through: the one named after the
    driver, as NVIDIA's DRA driver installs ``gpu.nvidia.com``; "" where there is none (or no DRA).

        device_class_of(api, "gpu.nvidia.com") -> "gpu.nvidia.com"
    """
    try:
        return client.ResourceV1Api(api).read_device_class(driver).metadata.name
    except ApiException as e:
        if e.status != 404:
            raise
        return ""


def dra_objects(api: client.ApiClient, node: str) -> list:
    """The node's ResourceSlices and the cluster's ResourceClaims, plain, for ``free_devices``;
    [] where the cluster serves no DRA (resource.k8s.io/v1, Kubernetes 1.34+)."""
    resource = client.ResourceV1Api(api)
    try:
        slices = resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
        claims = resource.list_resource_claim_for_all_namespaces().items
    except ApiException as e:
        if e.status != 404:
            raise
        return []
    return [{**plain(api, s), "kind": "ResourceSlice"} for s in slices] + [
        {**plain(api, c), "kind": "ResourceClaim"} for c in claims
    ]


def probe_class(api: client.ApiClient, handler: str) -> str:
    """A RuntimeClass of gpuop's own for ``handler``, for a probe where no RuntimeClass maps to it
    (the node's workloads reach the handler some other way): made, or found from a run that
    stopped before deleting it. Its name."""
    name = f"gpuop-probe-{handler}"
    try:
        client.NodeV1Api(api).create_runtime_class(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuop"}},
                "handler": handler,
            }
        )
    except ApiException as e:
        if e.status != 409:
            raise
    return name


def probe_class_gone(api: client.ApiClient, name: str):
    """The probe's own RuntimeClass (``probe_class``) deleted, once the probe is over."""
    try:
        client.NodeV1Api(api).delete_runtime_class(name)
    except ApiException as e:
        if e.status != 404:
            raise


def probes_left(api: client.ApiClient, namespace: str) -> list:
    """Delete every probe Pod and probe ResourceClaim in ``namespace``: called under the repair's
    lock, where none is a live run's, they are what a killed run left. Their names."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    left = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=PROBE_LABEL).items)
    for name in left:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise
    try:
        claims = sorted(
            c.metadata.name
            for c in resource.list_namespaced_resource_claim(namespace, label_selector=PROBE_LABEL).items
        )
    except ApiException as e:
        if e.status != 404:  # no DRA served: no claim can be left
            raise
        claims = []
    for name in claims:
        _deleted(lambda: resource.delete_namespaced_resource_claim(name, namespace))
    return left + [f"ResourceClaim {c}" for c in claims]
