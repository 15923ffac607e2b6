"""The rules of a runtime joined with the node it serves (gpuop.judgment.node_rules): the Pods bound
to it by RuntimeClass, by nvidia.com/gpu and by DRA claim, the GPUs it offers, the API's own view of loaded."""

from gpuop.judgment.entry import node_entry
from gpuop.judgment.rules import findings
from gpuop.judgment.view import node_view
from tests.helpers.nodereads import RC, daemon, gpu_pod, kinds, node, pod, read, with_cdi


def test_a_pod_whose_handler_goes_with_a_restart():
    view = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc",), version="2.4.2")))
    gaps = findings(view, [node(), RC, pod("p")], "gpu-a")
    assert kinds(gaps) == [("handler-gone-after-restart", "ns/p")]
    assert gaps[0]["views"] == ["scheduled", "after-restart"]


def test_a_host_without_its_node_object():
    view = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc", "nvidia"))))
    assert kinds(findings(view, [node("gpu-a")], "gpu-b")) == [("no-node-object", "gpu-b")]


def test_a_toolkit_pod_ready_without_its_handler_and_gpus_without_it():
    view = node_view(read(daemon()))
    objects = [
        node(),
        pod("toolkit-x", runtime_class=None, owner="nvidia-container-toolkit-daemonset"),
        pod("other", runtime_class=None, owner="dcgm-exporter"),
    ]
    assert kinds(findings(view, objects, "gpu-a")) == [
        ("gpu-advertised-not-loaded", "gpu-a"),
        ("toolkit-ready-not-loaded", "ns/toolkit-x"),
    ]
    view_ok = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc", "nvidia"))))
    assert findings(view_ok, objects, "gpu-a") == []


def test_a_gpu_pod_without_a_class_needs_the_default_runtime_or_cdi_with_a_spec():
    objects = [node(), RC, gpu_pod("cdi")]

    def gaps(d):
        return findings(node_view(read(d)), objects, "gpu-a")

    off = gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False))
    assert [(g["kind"], g["subject"], g["views"]) for g in off] == [
        ("gpu-pod-cdi-off", "ns/cdi", ["scheduled", "loaded"])
    ]
    assert off[0]["detail"] == (
        "Pod ns/cdi asks for 2 nvidia.com/gpu with no RuntimeClass: containerd 1.7.35 runs it "
        "with its default runtime runc, and CDI is off (enable_cdi), so it drops the Pod's CDI "
        "device request silently: it starts without a GPU"
    )
    no_spec = gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True))
    assert kinds(no_spec) == [("cdi-spec-missing", "ns/cdi")]
    assert "no spec of nvidia.com/gpu devices is in /etc/cdi, /var/run/cdi" in no_spec[0]["detail"]
    assert (
        gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True, specs=["/var/run/cdi/nvidia.yaml"]))
        == []
    )
    # the legacy mode: nvidia is the default runtime, CDI plays no part
    assert gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False, default="nvidia")) == []
    entry = node_entry(node_view(read(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False))), off)
    assert entry["pods_at_risk"] == 1


def test_the_api_s_view_of_loaded_handlers_is_held_against_the_node_s_own():
    def reporting(*handlers):
        n = node()
        n["status"]["runtimeHandlers"] = [{"name": h, "features": {"recursiveReadOnlyMounts": True}} for h in handlers]
        return n

    loaded = node_view(read(daemon(loaded=("nvidia", "runc"), after=("nvidia", "runc"), version="2.4.2")))
    assert findings(loaded, [reporting("", "nvidia", "runc")], "gpu-a") == []  # they agree
    stale = findings(loaded, [reporting("", "runc")], "gpu-a")
    assert [(g["kind"], g["subject"], g["views"]) for g in stale] == [
        ("loaded-disagrees-with-api", "gpu-a", ["loaded", "scheduled"])
    ]
    assert stale[0]["detail"] == (
        "node gpu-a's kubelet reports (default),runc loaded (Node.status.runtimeHandlers), "
        "its containerd 2.4.2 answers nvidia,runc through CRI"
    )
    assert findings(loaded, [node()], "gpu-a") == []  # containerd 1.x reports none: only the node's read judges
    entry = node_entry(loaded, [], reporting("", "nvidia", "runc"))
    assert entry["runtime_handlers"] == ["", "nvidia", "runc"] and entry["loaded"] == ["nvidia", "runc"]
    assert node_entry(loaded, [], node())["runtime_handlers"] is None


def claim(name, node_name="gpu-a", driver="gpu.nvidia.com", devices=("gpu-0",)):
    """A ResourceClaim as the scheduler leaves it once it allocated devices (resource.k8s.io/v1)."""
    results = [{"request": "gpu", "driver": driver, "pool": node_name, "device": d} for d in devices]
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                    ]
                },
            }
        },
    }


def dra_pod(name, claim_name, template=False):
    p = pod(name, runtime_class=None)
    p["spec"]["containers"] = [{"name": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]
    if template:  # made from a ResourceClaimTemplate: the claim's name is in the Pod's status
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    else:
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return p


def resource_slice(node_name="gpu-a", driver="gpu.nvidia.com", devices=2):
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def test_a_node_in_the_operators_cdi_way_needs_no_handler():
    """The GPU Operator's CDI (and NRI) way: CDI on with a GPU spec, no nvidia handler. The node
    offers GPUs and its toolkit Pod is Ready: no gap of its own; a Pod that still asks for
    RuntimeClass nvidia cannot start, and is named."""
    cdi_way = with_cdi(daemon(loaded=("runc",), version="2.2.9"), True, specs=["/var/run/cdi/nvidia.yaml"])
    view = node_view(read(cdi_way))
    toolkit = pod("toolkit-x", runtime_class=None, owner="nvidia-container-toolkit-daemonset")
    assert findings(view, [node(), toolkit, gpu_pod("cdi")], "gpu-a") == []
    assert kinds(findings(view, [node(), toolkit, RC, pod("asks-nvidia")], "gpu-a")) == [
        ("sandbox-fails", "ns/asks-nvidia")
    ]
    entry = node_entry(view, [], node(), [node()])
    assert (entry["gpu_path"], entry["gpus"]) == (["cdi"], 4)
    no_spec = node_view(read(with_cdi(daemon(loaded=("runc",), version="2.2.9"), True)))
    assert kinds(findings(no_spec, [node(), toolkit], "gpu-a")) == [
        ("gpu-advertised-not-loaded", "gpu-a"),
        ("toolkit-ready-not-loaded", "ns/toolkit-x"),
    ]


def test_a_dra_gpu_pod_needs_cdi_and_is_named_with_its_claim():
    objects = [
        node(gpus=0),
        resource_slice(),
        claim("train-gpu"),
        dra_pod("train", "train-gpu"),
        claim("tmpl-gpu-x1"),
        dra_pod("tmpl", "tmpl-gpu-x1", template=True),
        claim("other", driver="example.com/fpga"),
        dra_pod("fpga", "other"),
    ]
    off = node_view(read(with_cdi(daemon(loaded=("runc", "nvidia"), version="1.7.35"), False)))
    gaps = findings(off, objects, "gpu-a")
    assert kinds(gaps) == [("dra-claim-cdi-off", "ns/tmpl"), ("dra-claim-cdi-off", "ns/train")]
    train = next(g for g in gaps if g["subject"] == "ns/train")
    assert train["detail"] == (
        "Pod ns/train's claim ns/train-gpu was allocated gpu.nvidia.com device(s) gpu-0 on "
        "gpu-a, which its driver hands containerd 1.7.35 as CDI devices, and CDI is off "
        "(enable_cdi), so it drops the claim's CDI device request silently: it starts "
        "without a GPU"
    )
    assert node_entry(off, gaps, node(gpus=0), objects)["pods_at_risk"] == 2
    assert node_entry(off, gaps, node(gpus=0), objects)["gpus"] == 2  # its ResourceSlice's devices
    on = node_view(
        read(
            with_cdi(
                daemon(loaded=("runc", "nvidia"), version="2.4.2"),
                True,
                specs=["/var/run/cdi/k8s.gpu.nvidia.com-claim_train.yaml"],
            )
        )
    )
    assert findings(on, objects, "gpu-a") == []
