"""DRA on the lab's real control plane: a node publishes its GPUs in a ResourceSlice (as NVIDIA's
DRA driver does), a Pod asks for one through a ResourceClaim, the real scheduler allocates the
device and binds the Pod, and the node audit judges that Pod by its claim: the driver hands the
runtime CDI devices, so a node whose containerd has CDI off (1.7's default) starts it without its
GPU, and one with CDI on does not."""

import json
import os

import pytest

from gpuop.reach.kubeapi import api_client
from gpuop.repair import probe
from gpuop.repair.drain import Stalled
from gpuop.repair.pods import free_devices
from tests.helpers import fleetobjects, layouts, nodesfiles, simnodes
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.playbook import deploy

pytestmark = pytest.mark.lab  # drives the lab cluster (its nodes run no Pod): see pytest.ini

DRIVER = "gpu.nvidia.com"  # the node audit's default gpu_driver
NODES = (simnodes.Node("dra-cdi-off", "1.7.35"), simnodes.Node("dra-cdi-on", "2.4.2", after=layouts.CDI_SPEC))


def dra_objects() -> list:
    """A DeviceClass of the driver's devices; per node, its ResourceSlice (one GPU), a claim for
    one GPU and a Pod that uses it, placed on that node by affinity, left to the scheduler."""
    toleration = [{"key": fleetobjects.MARK, "operator": "Exists", "effect": "NoSchedule"}]
    docs = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    ]
    for n in NODES:
        docs += [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{n.name}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": n.name,
                    "pool": {"name": n.name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}],
                },
            },
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"train-{n.name}", "namespace": fleetobjects.NAMESPACE},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}},
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"train-{n.name}", "namespace": fleetobjects.NAMESPACE},
                "spec": {
                    "tolerations": toleration,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n.name]}]}
                                ]
                            }
                        }
                    },
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": f"train-{n.name}"}],
                    "containers": [{"name": "cuda", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}],
                },
            },
        ]
    return docs


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dra"))
    with simnodes.running(list(NODES), root) as key:
        fleetobjects.create_cluster_objects(list(NODES))
        try:
            kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in dra_objects()))
            for n in NODES:  # the real scheduler allocated the claim and bound the Pod
                eventually(
                    f"Pod train-{n.name} bound by the scheduler",
                    lambda n=n: get(f"pod/train-{n.name}", fleetobjects.NAMESPACE)["spec"].get("nodeName") == n.name,
                    timeout=60,
                )
            claims = {
                n.name: json.loads(
                    kubectl("get", "resourceclaim", f"train-{n.name}", "-n", fleetobjects.NAMESPACE, "-o", "json")
                )
                for n in NODES
            }
            path = nodesfiles.nodes_file(list(NODES), key, os.path.join(root, "nodes.yaml"), {})
            report = os.path.join(root, "fleet.json")
            run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
            assert os.path.exists(report), run.log[-4000:]
            with open(report) as f:
                doc = json.load(f)
            yield run, doc, claims
        finally:
            kubectl(
                "delete",
                "pod,resourceclaim",
                "--all",
                "-n",
                fleetobjects.NAMESPACE,
                "--grace-period=0",
                "--force",
                "--ignore-not-found",
            )
            kubectl("delete", "resourceslice", *[f"{n.name}-gpus" for n in NODES], "--ignore-not-found")
            kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found")


def test_the_scheduler_allocated_each_claim_on_its_node(audited):
    _, _, claims = audited
    for n in NODES:
        (result,) = claims[n.name]["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (DRIVER, n.name, "gpu-0")


def test_a_dra_gpu_pod_on_a_node_with_cdi_off_is_named_with_its_claim(audited):
    run, doc, _ = audited
    assert doc["cluster"]["dra"] == "read" and doc["cluster"]["requests"] == 7
    off = [g for g in doc["nodes"]["dra-cdi-off"]["gaps"] if g["kind"] == "dra-claim-cdi-off"]
    assert [(g["subject"], g["views"]) for g in off] == [
        (f"{fleetobjects.NAMESPACE}/train-dra-cdi-off", ["scheduled", "loaded"])
    ]
    assert off[0]["detail"] == (
        f"Pod {fleetobjects.NAMESPACE}/train-dra-cdi-off's claim {fleetobjects.NAMESPACE}/train-dra-cdi-off was "
        "allocated gpu.nvidia.com device(s) gpu-0 on dra-cdi-off, which its driver hands containerd 1.7.35 as CDI "
        "devices, and CDI is off (enable_cdi), so it drops the claim's CDI device request silently: it starts "
        "without a GPU"
    )
    assert f"GAP dra-cdi-off: [dra-claim-cdi-off] {off[0]['detail']}" in run.log
    on = doc["nodes"]["dra-cdi-on"]
    assert [g for g in on["gaps"] if g["kind"] == "dra-claim-cdi-off"] == []
    assert on["gpu_path"] == ["cdi"] and doc["nodes"]["dra-cdi-off"]["gpu_path"] == []
    # each node's GPUs: the 4 nvidia.com/gpu it advertises and the one device its ResourceSlice publishes
    assert (on["gpus"], doc["nodes"]["dra-cdi-off"]["gpus"]) == (5, 5)


def test_a_probe_claims_a_free_device_of_the_driver_through_the_scheduler(audited):
    """The fleet repair's probe on a node whose GPUs DRA publishes: with every device held (each
    node's gpu-0 by its training claim), none is free and a claim is not allocated: the probe stops
    at its deadline naming the scheduler's word. With a second device published, its own
    ResourceClaim is allocated it, the Pod bound there by the scheduler runs, and both are gone after."""
    api = api_client("", "", 20)
    ns, said = fleetobjects.NAMESPACE, []
    assert free_devices("dra-cdi-on", probe.dra_objects(api, "dra-cdi-on"), DRIVER) == 0
    assert probe.device_class_of(api, DRIVER) == DRIVER and probe.device_class_of(api, "none.example.com") == ""
    with pytest.raises(Stalled) as held:
        probe.probe(api, "dra-cdi-on", "fleet-nvidia", "busybox", ns, 8, said.append, device_class=DRIVER)
    assert str(held.value).startswith("probe Pod gpuop-fleet/gpuop-probe-"), str(held.value)
    assert (
        "(RuntimeClass fleet-nvidia) to run on dra-cdi-on: not within 8s; last seen: phase Pending, its last event "
        "FailedScheduling: 0/" in str(held.value)
    ), str(held.value)
    kubectl(
        "patch",
        "resourceslice",
        "dra-cdi-on-gpus",
        "--type=merge",
        "-p",
        json.dumps(
            {
                "spec": {
                    "pool": {"name": "dra-cdi-on", "generation": 2, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
                }
            }
        ),
    )
    assert free_devices("dra-cdi-on", probe.dra_objects(api, "dra-cdi-on"), DRIVER) == 1
    # it returns once its Pod runs: bound by the scheduler (its spec names no node), which binds
    # a Pod only with its claim allocated
    probe.probe(api, "dra-cdi-on", "fleet-nvidia", "busybox", ns, 60, said.append, device_class=DRIVER)
    for kind in ("resourceclaims", "pods"):  # both deleted after
        assert json.loads(kubectl("get", kind, "-n", ns, "-l", probe.PROBE_LABEL, "-o", "json"))["items"] == [], kind
    assert free_devices("dra-cdi-on", probe.dra_objects(api, "dra-cdi-on"), DRIVER) == 1  # given back
