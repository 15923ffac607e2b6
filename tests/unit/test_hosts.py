import os

import pytest

from gpuop.reach.hosts import HostsFileError, load_hosts, read_hosts

GOOD = """
defaults:
  ssh_user: root
  ssh_key: ~/.ssh/gpuop
hosts:
  lab-a:
    ssh_hostname: 192.0.2.10
  lab-b:
    ssh_hostname: 192.0.2.11
    ssh_port: 2222
    ssh_user: ubuntu
    gpuop_root: /root/other
    kube_context: kwok-b
"""


def test_hosts_get_safe_ssh_defaults_and_their_knobs():
    hosts = dict(load_hosts(GOOD, "hosts.yaml"))
    a, b = hosts["lab-a"], hosts["lab-b"]
    assert a["ssh_strict_host_key_checking"] == "yes"
    assert a["ssh_known_hosts_file"] == os.path.expanduser("~/.ssh/known_hosts")
    assert a["ssh_key"] == os.path.expanduser("~/.ssh/gpuop")
    assert "_sudo" not in a
    assert b["_sudo"] is True and b["ssh_port"] == 2222
    assert (b["gpuop_root"], b["kube_context"]) == ("/root/other", "kwok-b")


@pytest.mark.parametrize(
    "extra,message",
    [
        ("    ssh_password: hunter2", "ssh_password is refused"),
        ("    sudo_password: hunter2", "sudo_password is refused"),
        ("    ssh_strict_host_key_checking: accept-new", "host keys are always verified"),
        ("    replicaz: 3", "unknown key replicaz"),
    ],
)
def test_unsafe_or_unknown_keys_are_refused_by_name(extra, message):
    with pytest.raises(HostsFileError) as err:
        load_hosts(GOOD + extra + "\n", "hosts.yaml")
    assert "hosts.yaml: host lab-b" in str(err.value) and message in str(err.value)
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("hosts: {}", "non-empty 'hosts'"),
        ("hosts: [a, b]", "non-empty 'hosts'"),
        ("hosts:\n  x: {ssh_port: 22}", "ssh_hostname missing"),
        ("hostz:\n  x: {}\nhosts:\n  y: {ssh_hostname: h}", "unknown top-level keys"),
        ("hosts: [", "not valid YAML at line 1, column 9: expected the node content, but found '<stream end>'"),
    ],
)
def test_malformed_files_say_what_is_wrong(text, message):
    with pytest.raises(HostsFileError, match=message) as err:
        load_hosts(text, "hosts.yaml")
    assert "\n" not in str(err.value)  # one sentence


def test_a_file_that_is_missing_or_unreadable_says_which_and_what_to_do(tmp_path):
    with pytest.raises(HostsFileError) as err:
        read_hosts(str(tmp_path / "none.yaml"))
    assert str(err.value) == (
        f"{tmp_path}/none.yaml: no such file; list the lab hosts in one (see "
        "hosts.example.yaml), or point GPUOP_HOSTS at one"
    )
    with pytest.raises(HostsFileError, match=f"^{tmp_path}: cannot be read \\(Is a directory\\); GPUOP_HOSTS names"):
        read_hosts(str(tmp_path))
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(HostsFileError, match="binary.yaml: cannot be read .*utf-8"):
        read_hosts(str(tmp_path / "binary.yaml"))
    (tmp_path / "nodes.yaml").write_text("hosts:\n  a: {ssh_hostname: 10.0.0.5}\n")
    assert [name for name, _ in read_hosts(str(tmp_path / "nodes.yaml"))] == ["a"]


def test_a_uid_0_login_may_go_without_sudo():
    hosts = dict(load_hosts(GOOD + "    _sudo: false\n", "hosts.yaml"))
    assert hosts["lab-b"]["_sudo"] is False and "_sudo" not in hosts["lab-a"]


def test_a_nodes_file_takes_node_knobs_and_names_nodes_in_errors():
    import pytest

    from gpuop.knobs import NODE_PARSERS, DrainPolicy, parse_node_knobs
    from gpuop.reach.hosts import HostsFileError, load_hosts

    node = "hosts:\n  a:\n    ssh_hostname: 10.0.0.1\n    ssh_user: ubuntu\n    node_name: ip-10-0-0-1\n"
    hosts = load_hosts(node, "nodes.yaml", "the node", NODE_PARSERS)
    ((name, data),) = hosts
    assert data["_sudo"] is True and data["ssh_strict_host_key_checking"] == "yes"
    knobs = parse_node_knobs(
        {
            "gpu_handler": "nvidia",
            "gpu_driver": "gpu.nvidia.com",
            "crictl_binary": "crictl",
            "node_read_timeout_s": 150,
            "cluster_read_timeout_s": 20,
            "reach": "ssh",
            "nodes_from": "inventory",
            "node_pod_image": "busybox:1.37",
            "node_pod_namespace": "default",
            "containerd_restart": "systemctl restart containerd",
            "crio_restart": "systemctl restart crio",
            "drain": True,
            "drain_unmanaged": True,
            "drain_delete_emptydir_data": False,
            "drain_timeout_s": 240,
            "restart_timeout_s": 120,
            "repair_max_unavailable": 1,
            "repair_max_failures": 0,
            "repair_lock_s": 60,
            "agent_heartbeat_s": 300,
            **data,
        }
    )
    assert knobs.node_name == "ip-10-0-0-1" and knobs.report == ""
    # the drain's four knobs travel as one object, each by its name
    assert knobs.drain_policy == DrainPolicy(
        drain=True, delete_unmanaged=True, delete_emptydir_data=False, timeout_s=240
    )
    with pytest.raises(HostsFileError, match="ssh_hostname missing; expected the address of the node"):
        load_hosts("hosts:\n  a:\n    node_name: x\n", "nodes.yaml", "the node", NODE_PARSERS)
    # Each kind of target takes its own knobs: a lab's hosts file has no node_name, a nodes file no gpuop_root.
    with pytest.raises(HostsFileError, match="hosts.yaml: host a: unknown key node_name"):
        load_hosts(node, "hosts.yaml")
    with pytest.raises(HostsFileError, match="nodes.yaml: host a: unknown key gpuop_root"):
        load_hosts(
            "hosts:\n  a:\n    ssh_hostname: 10.0.0.1\n    gpuop_root: /root/gpuop\n",
            "nodes.yaml",
            "the node",
            NODE_PARSERS,
        )
    with pytest.raises(Exception, match="node_read_timeout_s"):
        parse_node_knobs(
            {
                "gpu_handler": "nvidia",
                "gpu_driver": "gpu.nvidia.com",
                "crictl_binary": "crictl",
                "node_read_timeout_s": 1,
            }
        )


def cluster():
    def node(name, gpus=0, labels=None, addresses=None):
        alloc = {"cpu": "8", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {
            "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": alloc, "capacity": alloc, "addresses": addresses or []},
        }

    gpu_pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "cpu-with-gpu-pod", "containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    return [
        node(
            "gpu-a",
            8,
            {"pool": "gpu"},
            [{"type": "Hostname", "address": "gpu-a"}, {"type": "InternalIP", "address": "10.0.0.7"}],
        ),
        node("gpu-b", 4, {"pool": "gpu", "spot": "true"}, [{"type": "ExternalIP", "address": "203.0.113.9"}]),
        node("cpu-only"),
        node("cpu-with-gpu-pod", labels={"pool": "cpu"}),
        gpu_pod,
    ]


def test_the_clusters_gpu_nodes_are_those_that_advertise_gpus_or_hold_a_gpu_pod():
    from gpuop.reach.nodes_file import gpu_nodes

    assert gpu_nodes(cluster()) == [
        ("cpu-with-gpu-pod", "cpu-with-gpu-pod"),
        ("gpu-a", "10.0.0.7"),
        ("gpu-b", "203.0.113.9"),
    ]


def pool_gpu():
    """What the API server answers for the Nodes of ``-l pool=gpu`` (it selects them), and every Pod."""
    return [o for o in cluster() if o["kind"] != "Node" or o["metadata"]["labels"].get("pool") == "gpu"]


def test_a_nodes_file_without_hosts_takes_the_clusters_nodes_with_defaults_and_overrides():
    from gpuop.knobs import NODE_PARSERS
    from gpuop.reach.nodes_file import cluster_hosts, load_nodes

    text = (
        "defaults: {ssh_user: ubuntu, ssh_key: ~/.ssh/k}\nnode_selector: pool=gpu\n"
        "overrides:\n  gpu-b: {ssh_hostname: 10.9.9.9, crictl_binary: /opt/crictl}\n"
    )
    nodes = load_nodes(text, "nodes.yaml", NODE_PARSERS)
    assert nodes.hosts is None
    hosts = dict(cluster_hosts(pool_gpu(), nodes, NODE_PARSERS, "context prod"))
    assert sorted(hosts) == ["gpu-a", "gpu-b"]
    assert (hosts["gpu-a"]["ssh_hostname"], hosts["gpu-a"]["node_name"], hosts["gpu-a"]["_sudo"]) == (
        "10.0.0.7",
        "gpu-a",
        True,
    )
    assert (hosts["gpu-b"]["ssh_hostname"], hosts["gpu-b"]["crictl_binary"]) == ("10.9.9.9", "/opt/crictl")
    with pytest.raises(
        HostsFileError, match=r"overrides name gpu-c, not a GPU node the cluster lists \(gpu-a, gpu-b\)"
    ):
        cluster_hosts(
            pool_gpu(),
            load_nodes("overrides: {gpu-c: {ssh_port: 2}}\nnode_selector: pool=gpu\n", "nodes.yaml", NODE_PARSERS),
            NODE_PARSERS,
            "context prod",
        )
    with pytest.raises(
        HostsFileError, match=r"the cluster \(context prod\) has no GPU node whose labels match pool=tpu"
    ):
        cluster_hosts(
            [o for o in cluster() if o["kind"] == "Pod"],  # the API server selected no Node
            load_nodes("node_selector: pool=tpu\n", "nodes.yaml", NODE_PARSERS),
            NODE_PARSERS,
            "context prod",
        )
    with pytest.raises(HostsFileError, match="overrides: gpu-a must be a mapping of that node's own keys"):
        load_nodes("overrides: {gpu-a: 2222}\n", "nodes.yaml", NODE_PARSERS)
    with pytest.raises(HostsFileError, match="overrides and node_selector apply to the nodes the cluster lists"):
        load_nodes("hosts: {a: {ssh_hostname: x}}\nnode_selector: pool=gpu\n", "nodes.yaml", NODE_PARSERS)


def test_the_inventory_reads_the_cluster_settings_of_the_command_line():
    from gpuop.reach.nodes_file import cli_data

    argv = [
        "pyinfra",
        "nodes.py",
        "audit.py",
        "--data",
        "kube_context=prod",
        "--data",
        "report=x.json",
        "--data",
        "kubeconfig=/k=v",
    ]
    assert cli_data(argv, ("kubeconfig", "kube_context")) == {"kube_context": "prod", "kubeconfig": "/k=v"}


def test_the_fleets_reporter_takes_the_files_settings_for_all_nodes():
    from gpuop.knobs import NODE_PARSERS
    from gpuop.reach.nodes_file import load_nodes

    text = (
        "defaults: {ssh_user: u, ssh_key: k, kube_context: prod, report: fleet.json}\nhosts: {a: {ssh_hostname: x}}\n"
    )
    assert load_nodes(text, "nodes.yaml", NODE_PARSERS).settings(NODE_PARSERS) == {
        "kube_context": "prod",
        "report": "fleet.json",
    }


def test_a_node_read_through_the_cluster_needs_no_address_and_is_named_by_its_node():
    import pytest

    from gpuop.knobs import NODE_PARSERS
    from gpuop.reach.hosts import HostsFileError
    from gpuop.reach.nodes_file import inventory_names, load_nodes

    text = "hosts:\n  a:\n    reach: cluster\n    node_name: ip-10-0-0-1\n  b:\n    ssh_hostname: 10.0.0.2\n"
    hosts = load_nodes(text, "nodes.yaml", NODE_PARSERS).hosts
    assert [n for n, _ in inventory_names(hosts, "nodes.yaml")] == ["@kubenode/ip-10-0-0-1", "b"]
    # --data reach=cluster (given) is above every host's own: b's node is its host name
    hosts = load_nodes(text, "nodes.yaml", NODE_PARSERS, {"reach": "cluster"}).hosts
    assert [n for n, _ in inventory_names(hosts, "nodes.yaml")] == ["@kubenode/ip-10-0-0-1", "@kubenode/b"]
    twice = "hosts:\n  a:\n    reach: cluster\n    node_name: x\n  b:\n    reach: cluster\n    node_name: x\n"
    with pytest.raises(HostsFileError, match="hosts a and b both read node x through the cluster"):
        inventory_names(load_nodes(twice, "nodes.yaml", NODE_PARSERS).hosts, "nodes.yaml")
    with pytest.raises(HostsFileError, match="host a: reach='kubectl': expected one of ssh, cluster"):
        inventory_names(
            load_nodes("hosts:\n  a:\n    reach: kubectl\n    ssh_hostname: h\n", "nodes.yaml", NODE_PARSERS).hosts,
            "nodes.yaml",
        )
    from gpuop.knobs import KnobError

    with pytest.raises(KnobError, match="knob nodes_from='agent': expected inventory .* or agents"):
        NODE_PARSERS["nodes_from"]("nodes_from", "agent")
