import pytest

from gpuop.knobs import KnobError, parse_knobs

DEFAULTS = {}
exec(open("group_data/all.py").read(), {}, DEFAULTS)


def knobs(**override):
    return parse_knobs({**DEFAULTS, **override})


def test_defaults_are_the_lab():
    lab = knobs()
    assert lab.gpuop_root == "/root/gpuop"
    assert lab.lab_nodes == ("lab-node-0", "lab-node-1", "lab-node-2")
    assert (lab.gpu_count, lab.replicas, lab.physical_gpus, lab.vram_per_gpu_gib) == (4, 5, 4, 40)
    assert lab.loaded_runtimes_observed == ("runc",)
    assert lab.kube_context == ""


def test_data_strings_are_parsed():
    lab = knobs(
        replicas="3",
        gpu_count="2",
        lab_nodes="a-0, a-1",
        gpu_node="a-0",
        timeslice_node="a-1",
        loaded_runtimes_observed="runc,nvidia",
        gpuop_root="/tmp/x/",
    )
    assert (lab.replicas, lab.gpu_count) == (3, 2)
    assert lab.lab_nodes == ("a-0", "a-1")
    assert lab.loaded_runtimes_observed == ("runc", "nvidia")
    assert lab.gpuop_root == "/tmp/x"


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("replicas", "0", "integer >= 1"),
        ("replicas", "-2", "integer >= 1"),
        ("gpu_count", "four", "integer"),
        ("gpu_count", "2.5", "integer"),
        ("gpu_node", "lab-node-9", "one of lab_nodes"),
        ("timeslice_node", "lab-node-0", "other than gpu_node"),
        ("toolkit_memory_upgrade", "64Gx", "quantity"),
        ("toolkit_memory_upgrade", "64GB!", "Kubernetes quantity"),
        ("toolkit_memory_initial", "-1Mi", "quantity"),
        ("gpuop_root", "relative/root", "absolute"),
        ("gpuop_root", "/", "absolute"),
        ("lab_nodes", "a,,b", "comma-separated"),
        ("lab_nodes", "Upper", "object name"),
        ("toolkit_version_upgrade", "v1 17", "image tag"),
        ("wait_timeout_s", "0", "integer >= 1"),
        ("replay", "maybe", "true or false"),
    ],
)
def test_bad_values_name_key_value_and_expectation(key, value, expected):
    with pytest.raises(KnobError) as err:
        knobs(**{key: value})
    assert err.value.key == key
    assert repr(value) in str(err.value) and expected in str(err.value)


def test_missing_knob_is_named():
    data = dict(DEFAULTS)
    del data["replicas"]
    with pytest.raises(KnobError, match="replicas"):
        parse_knobs(data)


def test_lab_containerd_knobs():
    lab = knobs()
    assert (lab.containerd_binary, lab.crictl_binary) == ("/usr/bin/containerd", "crictl")
    assert knobs(containerd_binary="").containerd_binary == ""
    assert knobs(containerd_binary=None).containerd_binary == ""
    with pytest.raises(KnobError, match="containerd_binary='containerd': expected an absolute path"):
        knobs(containerd_binary="containerd")
    with pytest.raises(KnobError, match="crictl_binary='crictl x'"):
        knobs(crictl_binary="crictl x")


def test_a_wait_longer_than_pyinfra_s_own_deadline_is_refused():
    with pytest.raises(KnobError) as bad:
        knobs(wait_timeout_s="580")
    assert str(bad.value).startswith("knob wait_timeout_s=")
    assert "at most _timeout - 60 (540): pyinfra ends any command of an operation after _timeout=600s" in str(bad.value)
    assert knobs(wait_timeout_s="540", _timeout=600).wait_timeout_s == 540


def test_a_root_too_long_for_containerd_s_sockets_is_refused():
    root = "/tmp/" + "r" * 70
    with pytest.raises(KnobError) as bad:
        knobs(gpuop_root=root)
    assert (
        f"a root short enough for the lab containerd's sockets ({root}/run/containerd/containerd.sock.ttrpc "
        "is 112 bytes; a unix socket path has at most 104)"
    ) in str(bad.value)
    assert knobs(gpuop_root=root, containerd_binary="").gpuop_root == root  # no daemon, no socket


def test_the_old_name_real_node_is_still_taken_and_said_once():
    from gpuop.knobs import renamed

    assert knobs(real_node="lab-node-0").kubelet_node == "lab-node-0"
    assert renamed({"real_node": "lab-node-0", "kubelet_node": ""}) == [
        "knob real_node is now kubelet_node (the lab node a real kubelet runs); taken as kubelet_node=lab-node-0"
    ]
    assert renamed({"kubelet_node": "lab-node-0"}) == []


def test_kubelet_node_is_the_gpu_node_on_a_lab_containerd():
    assert knobs().kubelet_node == ""  # the seed's lab: every node kwok's
    assert knobs(kubelet_node="lab-node-0").kubelet_node == "lab-node-0"
    with pytest.raises(KnobError, match="kubelet_node='lab-node-1': expected empty, or gpu_node"):
        knobs(kubelet_node="lab-node-1")
    with pytest.raises(KnobError, match="kubelet node runs on the lab containerd"):
        knobs(kubelet_node="lab-node-0", containerd_binary="")
