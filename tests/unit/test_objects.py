from gpuop.objects import differences


def test_only_fields_the_manifest_sets_count():
    desired = {"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}
    live = {"kind": "RuntimeClass", "metadata": {"name": "nvidia", "uid": "u", "resourceVersion": "9"},
            "handler": "nvidia"}
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
    assert differences(desired, {"containers": [{"name": "a", "image": "x:2"}]}) == [
        "containers[0].image"]
    assert differences(desired, {"containers": []}) == ["containers"]


def test_non_quantity_strings_are_not_coerced():
    assert differences({"data": {"n": "1"}}, {"data": {"n": 1}}) == ["data.n"]
