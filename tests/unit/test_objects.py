from gpuop.judgment.objects import differences, of_kind


def test_only_fields_the_manifest_sets_count():
    desired = {"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}
    live = {
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia", "uid": "u", "resourceVersion": "9"},
        "handler": "nvidia",
    }
    assert differences(desired, live) == []
    assert differences(desired, {**live, "handler": "runc"}) == ["handler"]
    assert differences(desired, {"kind": "RuntimeClass", "metadata": {"name": "nvidia"}}) == ["handler"]


def test_quantities_compare_by_value():
    desired = {"resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"memory": "64Gi"}}}
    live = {"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"memory": "65536Mi"}}}
    assert differences(desired, live) == []
    live["resources"]["requests"]["memory"] = "32Gi"
    assert differences(desired, live) == ["resources.requests.memory"]


def test_lists_compare_item_by_item():
    desired = {"containers": [{"name": "a", "image": "x:1"}]}
    assert differences(desired, {"containers": [{"name": "a", "image": "x:1", "tty": False}]}) == []
    assert differences(desired, {"containers": [{"name": "a", "image": "x:2"}]}) == ["containers[0].image"]
    assert differences(desired, {"containers": []}) == ["containers"]


def test_non_quantity_strings_are_not_coerced():
    assert differences({"data": {"n": "1"}}, {"data": {"n": 1}}) == ["data.n"]


def test_of_kind_picks_one_kind_and_name_out_of_a_mixed_read():
    read = [
        {"kind": "Node", "metadata": {"name": "lab-node-0"}},
        {"kind": "Pod", "metadata": {"name": "cuda-probe", "namespace": "gpu-lab"}},
        {"kind": "Node", "metadata": {"name": "lab-node-1"}},
    ]
    assert [o["metadata"]["name"] for o in of_kind(read, "Node")] == ["lab-node-0", "lab-node-1"]
    assert of_kind(read, "Node", "lab-node-1") == [read[2]]
    assert of_kind(read, "DaemonSet") == []
