"""The rules of a runtime alone (gpuop.judgment.runtime_rules): which daemon serves, what its next
start does, its files, whether CRI answers."""

from gpuop.judgment.entry import node_entry
from gpuop.judgment.rules import findings
from gpuop.judgment.view import node_view
from gpuop.outputs.tables import fleet_table
from tests.helpers.nodereads import CONFIG, DROPIN, MAIN, RC, SOCKET, daemon, kinds, node, pod, read


def test_the_daemon_the_read_asked_is_the_nodes_runtime_and_the_others_are_named():
    kubelet = {"pid": 3, "exe": "/usr/bin/kubelet", "args": [], "endpoint": "/run/other.sock"}
    view = node_view(read(daemon(pid=1, address="/run/other.sock"), daemon(pid=2, serves=False), kubelet=kubelet))
    assert view["daemon"]["pid"] == 1 and [o["pid"] for o in view["others"]] == [2]
    gaps = findings(view, [node(gpus=0)], "gpu-a")
    assert kinds(gaps) == [("second-containerd", "2")]
    assert "kubelet's endpoint" in gaps[0]["detail"]


def test_no_daemon_on_kubelets_endpoint_is_a_finding():
    kubelet = {"pid": 3, "exe": "/usr/bin/kubelet", "args": [], "endpoint": SOCKET}
    view = node_view(read(daemon(address="/run/a.sock", serves=False), kubelet=kubelet))
    gaps = findings(view, [node()], "gpu-a")
    assert kinds(gaps) == [("no-containerd", "gpu-a")] and SOCKET in gaps[0]["detail"]


def test_a_restart_the_daemon_refuses():
    view = node_view(read(daemon(cri_ok=False, starts=False)))
    assert view["cri_after_restart"] == "refuses-start"
    assert ("restart-refuses-start", "containerd") in kinds(findings(view, [node(gpus=0)], "gpu-a"))


def test_a_restart_that_would_not_start_names_the_file_and_puts_every_pod_at_risk():
    """A version-4 drop-in beside a version-2 root, as containerd 2.3.3 refuses it (its words, as
    its restart read gives them): the finding names the file, both versions and the binary's
    words; every active Pod on the node is at risk, a GPU Pod or not."""
    v4 = "/etc/containerd/conf.d/99-nvidia.toml"
    files = {CONFIG: {"mode": "644", "text": MAIN}, v4: {"mode": "644", "text": "version = 4\n" + DROPIN}}
    d = daemon(loaded=("runc", "nvidia"), version="2.3.3", files=files, cri_ok=False, starts=False)
    d["restart"]["reason"] = "the daemon will not start: drop-in config version 4 higher than root config version 2"
    view = node_view(read(d))
    other = pod("web", runtime_class=None)
    objects = [node(), RC, pod("gpu"), other, {**pod("gone"), "status": {"phase": "Succeeded"}}]
    gaps = findings(view, objects, "gpu-a")
    refused = next(g for g in gaps if g["kind"] == "restart-refuses-start")
    assert refused["detail"] == (
        "containerd 2.3.3 would not start at its next restart, so no Pod could start on this node; "
        f"{v4} (version 4) beside {CONFIG} (version 2): the daemon will not start: drop-in config version 4 "
        "higher than root config version 2"
    )
    assert node_entry(view, gaps, node(), objects)["pods_at_risk"] == 2  # gpu and web; not the ended one
    unrestarted = findings(node_view(read(daemon(files=files_with_seed_dropin()))), [node(gpus=0)], "gpu-a")
    assert kinds(unrestarted) == [("handler-not-loaded", "nvidia")]
    report = {
        "nodes": {
            "a-unrestarted": node_entry(node_view(read(daemon())), unrestarted),
            "b-refused": node_entry(view, gaps, node(), objects),
        },
        "gaps": [],
    }
    table = fleet_table(report)
    assert [line.split(":")[0] for line in table if line.startswith("GAP")] == ["GAP b-refused"] * len(gaps) + [
        "GAP a-unrestarted"
    ]  # the node that would not start first


def files_with_seed_dropin():
    return {
        CONFIG: {"mode": "644", "text": MAIN},
        "/etc/containerd/conf.d/99-nvidia.toml": {"mode": "644", "text": DROPIN},
    }


def test_without_crictl_the_loaded_view_is_not_guessed():
    d = daemon()
    d["loaded"] = {"cri": "down", "runtimes": [], "default_runtime": "", "error": "exit 127", "crictl": False}
    view = node_view(read(d))
    assert view["loaded_from"] == "no-crictl"
    assert findings(view, [node(), RC, pod("p")], "gpu-a") == []  # nothing claimed that was not seen
