"""The audit of real nodes, on a simulated fleet: each node in its own namespaces with its own
containerd at the default paths and its own sshd, and a kwok Node with Pods bound to it."""

import json
import os
import re
import signal
import socket
import time

import pytest
import tomli_w
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpuop.judgment.configs import nvidia_dropin
from tests.helpers import layouts, nodesfiles, simnodes
from tests.helpers.fleetobjects import NAMESPACE
from tests.helpers.kube import component_pidfile, eventually, kubectl, lab_up
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import deploy, target_commands
from tests.helpers.simnodes import Node
from tests.helpers.ssh import free_port

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

SEED_DROPIN = tomli_w.dumps(nvidia_dropin())


def planted():
    """The fleet: one healthy node, and one of each way the incident shows on real nodes."""
    ctk = layouts.nvidia_ctk_configure()
    return [
        # configured by the real nvidia-ctk, then (re)started: written is loaded
        Node("gpu-healthy", "2.4.2", before=[ctk], api_handlers=("", "nvidia", "runc")),
        # the same, never restarted: the seed's trap (a restart is safe, and needed)
        Node("gpu-unrestarted", "1.7.35", after=[ctk], cdi_pod=True),
        # the incident: the seed's drop-in on 1.x, not loaded, and the restart is fatal
        Node("gpu-incident", "1.6.20", hostname="ip-10-0-0-7", after=[write_file(DROPIN, SEED_DROPIN)]),
        # the same drop-in on 2.x, loaded: fine
        Node("gpu-v2-dropin", "2.0.14", files={DROPIN: SEED_DROPIN}, after=layouts.CDI_SPEC, cdi_pod=True),
        # a drop-in the imports miss, and a second containerd beside the node's own
        Node(
            "gpu-missed-import",
            "2.2.9",
            imports="/etc/containerd/config.d/*.toml",
            files={DROPIN: SEED_DROPIN},
            after=layouts.another_containerd("2.2.9", "second"),
            cdi_pod=True,
        ),
        # CRI already down: the seed's drop-in was there when 1.7 started
        Node("gpu-cri-down", "1.7.35", files={DROPIN: SEED_DROPIN}),
        # nvidia loaded, then its drop-in removed: the GPU Pod runs now, and not after a restart
        Node("gpu-dropin-removed", "1.7.35", before=[ctk], after=[f"rm {DROPIN}"]),
        # two containerds, and a real kubelet on the second: that one is the node's runtime
        # ... and its Node's status still says what its runtime loaded before nvidia (a stale report)
        Node(
            "gpu-kubelet",
            "1.6.20",
            after=layouts.another_containerd("2.4.2", "gpu", nvidia=True),
            kubelet="unix:///run/containerd-gpu/containerd.sock",
            api_handlers=("", "runc"),
        ),
        # EKS AL2023's kubelet: JSON --config, the endpoint in a JSON --config-dir drop-in
        Node(
            "gpu-eks",
            "1.7.35",
            after=layouts.another_containerd("2.4.2", "eks", nvidia=True),
            kubelet="unix:///run/containerd-eks/containerd.sock",
            kubelet_layout="eks",
        ),
        # RKE2's: its own containerd by flags on /run/k3s/containerd, kubelet with --config-dir alone;
        # the toolkit wrote nvidia into the config.toml RKE2 writes anew from its template at start
        Node(
            "gpu-rke2",
            "1.7.35",
            after=layouts.rke2_containerd("2.4.2"),
            kubelet=f"unix://{layouts.K3S_SOCKET}",
            kubelet_layout="rke2",
        ),
        # k3s: one multicall binary (its containerd's /proc/PID/exe is k3s), kubelet inside the k3s
        # process, the toolkit where k3s finds it at start: its next start keeps nvidia
        Node("gpu-k3s", "1.7.35", after=layouts.k3s("2.4.2")),
        # the GPU Operator's installer, in its three outcomes: restart mode none (written, never
        # loaded: gpu-operator 399); signal, which ends containerd (it does not handle SIGHUP), with
        # nothing to start it again; and signal under a supervisor (Restart=always): loaded
        Node("gpu-installer-none", "2.4.2", after=layouts.nvidia_ctk_installer("none")),
        Node("gpu-installer-signal", "2.4.2", after=layouts.nvidia_ctk_installer("signal")),
        Node(
            "gpu-installer-supervised",
            "2.4.2",
            supervised=True,
            after=layouts.nvidia_ctk_installer("signal") + layouts.cri_back(),
        ),
        # AKS's names: its GPU handler nvidia-container-runtime (the default), none named nvidia; a
        # Pod of a RuntimeClass with that handler runs, one asking for nvidia cannot start
        Node(
            "gpu-aks",
            "2.4.2",
            files={layouts.CONFIG: layouts.aks_config()},
            aks_pod=True,
            knobs={"gpu_handler": "nvidia-container-runtime"},
        ),
    ]


# Exactly the planted gaps, per node: (kind, subject); "toolkit" stands for the toolkit's Pod.
EXPECTED = {
    "gpu-healthy": [],
    "gpu-v2-dropin": [],
    "gpu-unrestarted": [
        ("handler-not-loaded", "nvidia"),
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-unrestarted"),
        ("gpu-pod-cdi-off", "gpuop-fleet/cdi-gpu-unrestarted"),
        ("gpu-advertised-not-loaded", "gpu-unrestarted"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "gpu-incident": [
        ("handler-not-loaded", "nvidia"),
        ("restart-takes-cri-down", "containerd"),
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-incident"),
        ("gpu-advertised-not-loaded", "gpu-incident"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "gpu-missed-import": [
        ("second-containerd", "pid"),
        ("dropin-not-imported", DROPIN),
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-missed-import"),
        ("cdi-spec-missing", "gpuop-fleet/cdi-gpu-missed-import"),
        ("gpu-advertised-not-loaded", "gpu-missed-import"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "gpu-kubelet": [("second-containerd", "pid"), ("loaded-disagrees-with-api", "gpu-kubelet")],
    "gpu-eks": [("second-containerd", "pid")],
    "gpu-rke2": [
        ("second-containerd", "pid"),
        ("lost-at-regeneration", "nvidia"),
        ("handler-gone-after-restart", "gpuop-fleet/gpu-gpu-rke2"),
    ],
    "gpu-k3s": [("second-containerd", "pid")],
    "gpu-dropin-removed": [("handler-gone-after-restart", "gpuop-fleet/gpu-gpu-dropin-removed")],
    "gpu-installer-none": [("handler-not-loaded", h) for h in ("nvidia", "nvidia-cdi", "nvidia-legacy")]
    + [
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-installer-none"),
        ("gpu-advertised-not-loaded", "gpu-installer-none"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "gpu-installer-signal": [("no-containerd", "gpu-installer-signal")],
    "gpu-installer-supervised": [],
    "gpu-aks": [("sandbox-fails", "gpuop-fleet/gpu-gpu-aks")],
    "gpu-cri-down": [
        ("cri-down", "containerd"),
        ("restart-takes-cri-down", "containerd"),
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-cri-down"),
        ("gpu-advertised-not-loaded", "gpu-cri-down"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
}


def _subject(gap):
    if gap["kind"] == "toolkit-ready-not-loaded":
        return "toolkit"
    if gap["kind"] == "second-containerd":
        return "pid"
    return gap["subject"]


def _cluster_state():
    """Every fleet object's identity and version, and the Nodes' own metadata and spec (kwok
    heartbeats move a Node's status, nothing else)."""
    state = {}
    for kind in ("pods", "daemonsets", "runtimeclasses", "namespaces"):
        for o in json.loads(kubectl("get", kind, "-A", "-o", "json"))["items"]:
            m = o["metadata"]
            state[(kind, m.get("namespace"), m["name"])] = (m["uid"], m["resourceVersion"])
    for o in json.loads(kubectl("get", "nodes", "-o", "json"))["items"]:
        m = o["metadata"]
        state[("nodes", None, m["name"])] = (m["uid"], m.get("labels"), m.get("annotations"), o["spec"])
    return state


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The fleet, its kubelets included, leaves nothing on the host: the sysctls kubelet sets too."""
    root = str(tmp_path_factory.mktemp("fleet"))
    nodes = planted()
    with simnodes.fleet(nodes, root) as key:
        yield (
            nodes,
            nodesfiles.nodes_file(nodes, key, os.path.join(root, "nodes.yaml"), {"gpu-incident": "gpu-incident"}),
            root,
        )


@pytest.fixture(scope="module")
def audited(simulated):
    nodes, path, root = simulated
    before = {
        "nodes": {n.name: simnodes.node_files(n) for n in nodes},
        "cluster": _cluster_state(),
        "host": simnodes.host_files(),
    }
    report, textfile = os.path.join(root, "fleet.json"), os.path.join(root, "fleet.prom")
    run = deploy(
        None,
        f"report={report}",
        f"textfile={textfile}",
        env={"GPUOP_NODES": path},
        inventory="nodes.py",
        script="audit.py",
        debug=True,
    )
    after = {
        "nodes": {n.name: simnodes.node_files(n) for n in nodes},
        "cluster": _cluster_state(),
        "host": simnodes.host_files(),
    }
    assert os.path.exists(report), run.log[-4000:]  # the run reports, gaps or not
    with open(report) as f:
        doc = json.load(f)
    with open(textfile) as f:
        prom = f.read()
    return run, doc, prom, before, after


def test_the_audit_names_exactly_the_planted_gaps(audited):
    run, doc, _, _, _ = audited
    assert run.code != 0, "a fleet with gaps must fail the run"
    found = {name: sorted((g["kind"], _subject(g)) for g in entry["gaps"]) for name, entry in doc["nodes"].items()}
    assert found == {name: sorted(gaps) for name, gaps in EXPECTED.items()}
    assert [(g["kind"], g["subject"]) for g in doc["gaps"]] == [("runtimeclass-handler-nowhere", "fleet-kata")]
    assert doc["unread"] == []


def test_each_node_is_read_where_it_runs(audited):
    _, doc, _, _, _ = audited
    nodes = doc["nodes"]
    assert {n: e["version"] for n, e in nodes.items()} == {
        "gpu-healthy": "2.4.2",
        "gpu-unrestarted": "1.7.35",
        "gpu-incident": "1.6.20",
        "gpu-v2-dropin": "2.0.14",
        "gpu-missed-import": "2.2.9",
        "gpu-cri-down": "1.7.35",
        "gpu-kubelet": "2.4.2",
        "gpu-dropin-removed": "1.7.35",
        "gpu-eks": "2.4.2",
        "gpu-rke2": "2.4.2",
        "gpu-k3s": "2.4.2",
        "gpu-installer-none": "2.4.2",
        "gpu-installer-signal": "none",
        "gpu-installer-supervised": "2.4.2",
        "gpu-aks": "2.4.2",
    }
    for name, e in nodes.items():  # systemd's layout: default config and socket, no flags
        if name not in ("gpu-kubelet", "gpu-eks", "gpu-rke2", "gpu-k3s", "gpu-installer-signal"):
            assert e["daemon"]["config"] == "/etc/containerd/config.toml", name
            assert e["daemon"]["address"] == "/run/containerd/containerd.sock", name
    kubelet = nodes["gpu-kubelet"]  # the daemon kubelet talks to, not the one on the default socket
    assert kubelet["kubelet_endpoint"] == kubelet["daemon"]["address"] == "/run/containerd-gpu/containerd.sock"
    assert kubelet["daemon"]["config"] == "/etc/containerd/gpu.toml"
    assert sorted(kubelet["loaded"]) == ["nvidia", "runc"]
    second = next(g for g in kubelet["gaps"] if g["kind"] == "second-containerd")
    assert "/run/containerd/containerd.sock" in second["detail"] and "kubelet's endpoint" in second["detail"]
    # EKS: the endpoint from a JSON drop-in of --config-dir, over a JSON --config that names none
    eks = nodes["gpu-eks"]
    assert eks["kubelet_endpoint"] == eks["daemon"]["address"] == "/run/containerd-eks/containerd.sock"
    assert sorted(eks["loaded"]) == ["nvidia", "runc"]
    # RKE2: its containerd by its flags, kubelet's endpoint from --config-dir alone
    rke2 = nodes["gpu-rke2"]
    assert rke2["kubelet_endpoint"] == rke2["daemon"]["address"] == layouts.K3S_SOCKET
    assert rke2["daemon"]["config"] == "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
    assert sorted(rke2["loaded"]) == ["nvidia", "runc"]
    # ... and what its next start loads: the file RKE2 renders from the operator's template
    template = "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl"
    assert rke2["after_restart"] == ["runc"] and rke2["cri_after_restart"] == "ok"
    assert (rke2["regenerated_by"], rke2["regenerated_from"]) == ("rke2", template)
    lost = next(g for g in rke2["gaps"] if g["kind"] == "lost-at-regeneration")
    assert lost["detail"].endswith(f"Define it in {template}"), lost
    # the API's view of what is loaded (Node.status.runtimeHandlers), beside the node's own
    assert nodes["gpu-healthy"]["runtime_handlers"] == ["", "nvidia", "runc"]
    assert nodes["gpu-kubelet"]["runtime_handlers"] == ["", "runc"]
    assert nodes["gpu-unrestarted"]["runtime_handlers"] is None  # none reported: the node's read alone judges
    # CDI as the daemon holds it (crictl info), and the GPU specs in the directories it reads
    assert nodes["gpu-v2-dropin"]["cdi"] == {
        "enabled": True,
        "spec_dirs": ["/etc/cdi", "/var/run/cdi"],
        "gpu_specs": ["/var/run/cdi/nvidia.yaml"],
    }
    assert nodes["gpu-unrestarted"]["cdi"]["enabled"] is False  # 1.7: off by default
    assert nodes["gpu-missed-import"]["cdi"] == {
        "enabled": True,
        "spec_dirs": ["/etc/cdi", "/var/run/cdi"],
        "gpu_specs": [],
    }
    # k3s: its containerd found though its binary is k3s, asked after a restart through its
    # containerd link (never through k3s's own CLI), kubelet's endpoint from the k3s process
    k3s = nodes["gpu-k3s"]
    assert re.search(r"/multicall-2\.4\.2-[0-9a-f]{12}/bin/k3s$", k3s["daemon"]["exe"]), k3s["daemon"]
    assert re.search(r"/multicall-2\.4\.2-[0-9a-f]{12}/bin/containerd$", k3s["daemon"]["binary"]), k3s["daemon"]
    assert k3s["kubelet_endpoint"] == k3s["daemon"]["address"] == layouts.K3S_SOCKET
    assert k3s["daemon"]["config"] == "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    assert sorted(k3s["loaded"]) == sorted(k3s["after_restart"]) == ["nvidia", "runc"]
    # its next start renders the built-in template, with the toolkit's runtime it finds
    assert (k3s["regenerated_by"], k3s["regenerated_from"]) == ("k3s", None)
    assert sorted(nodes["gpu-healthy"]["loaded"]) == sorted(nodes["gpu-healthy"]["after_restart"]) == ["nvidia", "runc"]
    assert nodes["gpu-unrestarted"]["loaded"] == ["runc"] and "nvidia" in nodes["gpu-unrestarted"]["after_restart"]
    assert nodes["gpu-unrestarted"]["cri_after_restart"] == "ok"
    assert nodes["gpu-incident"]["cri_after_restart"] == "fails"
    assert nodes["gpu-cri-down"]["loaded_from"] == "cri-down"
    # the GPU Operator's installer: what it wrote (its conf.d drop-in, nvidia the default), and
    # what each restart mode made of it
    toolkit = ["nvidia", "nvidia-cdi", "nvidia-legacy", "runc"]
    none, supervised = nodes["gpu-installer-none"], nodes["gpu-installer-supervised"]
    assert sorted(none["written"]) == sorted(supervised["written"]) == toolkit
    assert none["loaded"] == ["runc"] and sorted(none["after_restart"]) == toolkit
    assert sorted(supervised["loaded"]) == sorted(supervised["after_restart"]) == toolkit
    assert supervised["default_runtime"] == "nvidia" and supervised["cri_after_restart"] == "ok"
    (gone,) = nodes["gpu-installer-signal"]["gaps"]
    assert gone["detail"] == "no containerd runs: no Pod can start on this node", gone
    # AKS: the handlers as the node names them, the default one its GPU handler
    aks = nodes["gpu-aks"]
    assert sorted(aks["loaded"]) == ["nvidia-container-runtime", "runc", "untrusted"]
    assert aks["default_runtime"] == "nvidia-container-runtime" and aks["pods_at_risk"] == 1
    incident = next(g for g in nodes["gpu-incident"]["gaps"] if g["kind"] == "sandbox-fails")
    assert 'failed to get sandbox runtime: no runtime for "nvidia" is configured' in incident["detail"]
    assert incident["views"] == ["scheduled", "loaded"]


def cri_after_restart(name: str) -> str:
    """What the planted node's restart does: its CRI fails where a planted gap says so, nothing
    runs on the node whose containerd the installer's signal ended, else it loads."""
    kinds = [kind for kind, _ in EXPECTED[name]]
    return "fails" if "restart-takes-cri-down" in kinds else "unknown" if "no-containerd" in kinds else "ok"


def test_table_json_and_textfile_say_the_planted_gaps(audited):
    run, doc, prom, _, _ = audited
    metrics = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(prom)
        for s in family.samples
    }
    for name, planted in EXPECTED.items():
        entry = doc["nodes"][name]
        assert entry["cri_after_restart"] == cri_after_restart(name), name
        assert metrics[("gpuop_node_gap_count", (("node", name),))] == len(planted)
        assert metrics[("gpuop_node_cri_after_restart", (("node", name), ("state", cri_after_restart(name))))] == 1
        row = next(line for line in run.log.splitlines() if line.split()[:1] == [name])
        conditions = entry["conditions"]
        assert row.split()[-3:] == [
            str(len(planted)),
            conditions["GPURuntimeProblem"],
            conditions["GPURuntimeRestartUnsafe"],
        ]
        assert cri_after_restart(name) in row.split()
        for gap in entry["gaps"]:
            assert f"GAP {name}: [{gap['kind']}] {gap['detail']}" in run.log
    assert metrics[("gpuop_fleet_gaps", (("kind", "runtimeclass-handler-nowhere"),))] == 1


def test_one_command_per_node_one_cluster_read(audited):
    run, doc, _, _, _ = audited
    commands = target_commands(run.log)
    per_host = {}
    for host, _ in commands:
        per_host[host] = per_host.get(host, 0) + 1
    assert per_host == {f"ssh-{n}": 1 for n in EXPECTED}, commands
    assert doc["cluster"]["reads"] == 1 and run.log.count("cluster read once for the fleet") == 1


def test_nothing_changed_on_any_node_or_in_the_cluster(audited):
    _, _, _, before, after = audited
    for name in EXPECTED:
        assert after["nodes"][name] == before["nodes"][name], name
    assert after["cluster"] == before["cluster"]
    assert after["host"] == before["host"]


def test_with_no_hosts_listed_the_cluster_lists_its_gpu_nodes_and_the_report_is_the_same(simulated, audited):
    """A nodes file of defaults only: the cluster's GPU nodes (the fleet's label selects them
    from the lab's own) are audited, each at its InternalIP, and the report is the one of the
    nodes file that lists them, field for field; the cluster is still read once."""
    nodes, _, root = simulated
    _, listed, _, _, _ = audited
    key, _ = simnodes.keypair(root)
    os.makedirs(os.path.join(root, "from-cluster"))
    path = nodesfiles.defaults_file(nodes, key, os.path.join(root, "from-cluster", "nodes.yaml"))
    report = os.path.join(root, "from-cluster", "fleet.json")
    run = deploy(
        None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py", debug=True
    )
    with open(report) as f:
        got = json.load(f)
    assert run.code != 0  # the same gaps
    assert sorted(got["nodes"]) == sorted(n.name for n in nodes) and got["unread"] == []
    assert got["nodes"] == listed["nodes"] and got["gaps"] == listed["gaps"]
    assert got["cluster"]["reads"] == 1 and "cluster read once for the fleet (it listed the GPU nodes)" in run.log
    assert sorted({h for h, _ in target_commands(run.log)}) == sorted(n.name for n in nodes)


def test_the_cluster_read_pages_and_reads_the_same(simulated):
    """The fleet's cluster read asks the API in pages (its chunking): small pages, more requests,
    the same objects, each once."""
    from gpuop.reach.kubeapi import read_cluster

    whole, how = read_cluster(os.environ.get("KUBECONFIG", ""), "", 20)
    paged, paged_how = read_cluster(os.environ.get("KUBECONFIG", ""), "", 20, page=3)
    key = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in whole]
    assert [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in paged] == key
    assert len(set(key)) == len(key) and how["requests"] == 7 and how["dra"] == "read"  # DRA's two kinds and Events too
    counts = [
        sum(1 for o in whole if o["kind"] == k)
        for k in ("Node", "RuntimeClass", "Pod", "DaemonSet", "ResourceClaim", "ResourceSlice")
    ]
    # a full last page may still carry a continue token: one more request, answering none
    assert sum(max(1, -(-n // 3)) for n in counts) <= paged_how["requests"] <= sum(n // 3 + 1 for n in counts)


def test_a_stalled_toolkit_rollout_is_a_gap_of_the_fleet_as_of_the_lab(simulated):
    """The toolkit DaemonSet updated to a Pod no node has the memory for: its rollout stalls as the
    seed's step 8 does, and the fleet audit names it among the cluster's gaps, as the lab's does.
    (Before the tests that stop the API server: the lab healed after them has no fleet Nodes.)"""
    _, path, root = simulated
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc["hosts"] = {"ssh-gpu-healthy": doc["hosts"]["ssh-gpu-healthy"]}
    one = os.path.join(root, "nodes-one.yaml")
    with open(one, "w") as f:
        yaml.safe_dump(doc, f)
    toolkit = "daemonset/fleet-container-toolkit"
    kubectl(
        "patch",
        "-n",
        NAMESPACE,
        toolkit,
        "--type=json",
        "-p",
        json.dumps(
            [
                {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "toolkit:v1.17.1"},
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/resources",
                    "value": {"requests": {"memory": "64Ti"}},
                },
            ]
        ),
    )

    seen = []

    def stalled():
        ds = json.loads(kubectl("get", "-n", NAMESPACE, toolkit, "-o", "json"))
        pods = json.loads(kubectl("get", "pods", "-n", NAMESPACE, "-l", "app=fleet-toolkit", "-o", "json"))["items"]
        refused = [
            p for p in pods if any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])
        ]
        seen.append((ds["status"], sorted(p["status"].get("phase") for p in pods)))
        return (
            ds["status"].get("observedGeneration") == ds["metadata"]["generation"]
            and refused
            and ds["status"].get("numberUnavailable", 0) >= 1
        )

    try:
        try:
            eventually("the toolkit's rollout to stall on memory", stalled, timeout=180)
        except AssertionError as e:
            raise AssertionError(f"{e}: the DaemonSet's status and its Pods' phases: {seen[-1:]}") from None
        report = os.path.join(root, "stalled.json")
        run = deploy(None, f"report={report}", env={"GPUOP_NODES": one}, inventory="nodes.py", script="audit.py")
        with open(report) as f:
            gaps = [g for g in json.load(f)["gaps"] if g["kind"] == "rollout-stalled"]
        assert [(g["subject"], g["views"]) for g in gaps] == [
            (f"{NAMESPACE}/fleet-container-toolkit", ["scheduled"])
        ], run.log[-3000:]
        # its one updated Pod is the one no node takes; a DaemonSet Pod on each of the 15 fleet nodes
        assert gaps[0]["detail"] == (
            f"DaemonSet {NAMESPACE}/fleet-container-toolkit: rollout stalled at 1/15 updated, "
            "blocker insufficient-memory"
        )
        assert f"GAP fleet: [rollout-stalled] {gaps[0]['detail']}" in run.log
    finally:  # the toolkit back, every Pod Ready again, for the tests after
        kubectl("rollout", "undo", "-n", NAMESPACE, toolkit)
        kubectl("rollout", "status", "-n", NAMESPACE, toolkit, "--timeout=120s")


def test_a_node_that_does_not_answer_is_named_and_the_rest_is_reported(simulated):
    """Nodes that cannot be read, each one line: a refused port, a port that accepts and never
    speaks SSH, a host key that is not known; none of them a library's traceback."""
    nodes, path, root = simulated
    with open(path) as f:
        doc = yaml.safe_load(f)
    healthy = doc["hosts"]["ssh-gpu-healthy"]
    stranger = os.path.join(root, "no_known_hosts")
    open(stranger, "w").close()
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog), never speaks
    doc["hosts"] = {
        "ssh-gpu-healthy": healthy,
        "ssh-gone": {"ssh_hostname": "127.0.0.1", "ssh_port": free_port(), "node_name": "gpu-gone"},
        "ssh-silent": {"ssh_hostname": "127.0.0.1", "ssh_port": silent.getsockname()[1], "node_name": "gpu-silent"},
        "ssh-stranger": {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": healthy["ssh_port"],
            "ssh_known_hosts_file": stranger,
            "node_name": "gpu-stranger",
        },
        # unreachable too, but its Node's kubelet reports what its runtime loaded
        "ssh-gone-reporting": {"ssh_hostname": "127.0.0.1", "ssh_port": free_port(), "node_name": "gpu-kubelet"},
    }
    partial = os.path.join(root, "nodes-partial.yaml")
    with open(partial, "w") as f:
        yaml.safe_dump(doc, f)
    report = os.path.join(root, "partial.json")
    with silent:
        run = deploy(None, f"report={report}", env={"GPUOP_NODES": partial}, inventory="nodes.py", script="audit.py")
    assert run.code != 0
    # pyinfra pads each host's name to the longest's
    assert re.search(r"\[ssh-silent\] +SSH error \(Error reading SSH protocol banner\)\n", run.log), run.log
    assert re.search(
        r"\[ssh-stranger\] +SSH error \(StrictPolicy: No host key for \[127\.0\.0\.1\]:\d+ found in "
        r"known_hosts\)",
        run.log,
    )
    assert re.search(r"\[ssh-gone\] +Could not connect \(", run.log)
    assert "Traceback" not in run.log
    with open(report) as f:
        got = json.load(f)
    assert sorted(got["nodes"]) == ["gpu-healthy", "gpu-kubelet"] and got["nodes"]["gpu-healthy"]["gaps"] == []
    assert got["unread"] == ["ssh-gone", "ssh-gone-reporting", "ssh-silent", "ssh-stranger"]
    assert "not read, so not judged: ssh-gone, ssh-silent, ssh-stranger\n" in run.log
    assert (
        "not read, judged on what its kubelet reports alone (Node.status.runtimeHandlers): "
        "ssh-gone-reporting (node gpu-kubelet)" in run.log
    )
    assert got["judged_from_api"] == {"ssh-gone-reporting": "gpu-kubelet"}
    # judged on the API's view alone: its Node says "" and runc, so its GPU Pod cannot start
    reported = got["nodes"]["gpu-kubelet"]
    assert (reported["loaded_from"], reported["loaded"], reported["runtime_handlers"]) == (
        "api",
        ["runc"],
        ["", "runc"],
    )
    assert sorted((g["kind"], _subject(g)) for g in reported["gaps"]) == [
        ("gpu-advertised-not-loaded", "gpu-kubelet"),
        ("sandbox-fails", "gpuop-fleet/gpu-gpu-kubelet"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ]


def test_a_containerd_that_stops_answering_is_named_and_the_rest_is_reported(simulated):
    """One node's containerd stops answering (SIGSTOP) during the audit: its CRI read ends at its
    deadline, the node is reported with its CRI down in crictl's words, and every other node is
    reported as before."""
    nodes, path, root = simulated
    node = next(n for n in nodes if n.name == "gpu-healthy")
    daemon = simnodes.node_containerd(node)
    report = os.path.join(root, "stalled-cri.json")
    os.kill(daemon, signal.SIGSTOP)
    try:
        started = time.monotonic()
        run = deploy(
            None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py", timeout_s=120
        )
        took = time.monotonic() - started
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert took < 60, took
    with open(report) as f:
        got = json.load(f)
    assert sorted(got["nodes"]) == sorted(EXPECTED) and got["unread"] == []
    healthy = got["nodes"]["gpu-healthy"]
    assert healthy["loaded_from"] == "cri-down", healthy
    (down,) = [g for g in healthy["gaps"] if g["kind"] == "cri-down"]
    assert "containerd 2.4.2 runs but its CRI does not answer" in down["detail"], down
    assert sorted(healthy["after_restart"]) == ["nvidia", "runc"]  # its binary still answers for the restart view
    for name, gaps in EXPECTED.items():
        if name != "gpu-healthy":
            assert sorted((g["kind"], _subject(g)) for g in got["nodes"][name]["gaps"]) == sorted(gaps), name
    assert "Traceback" not in run.log


def test_a_node_whose_read_hangs_mid_command_is_named_within_its_deadline(simulated):
    """A node whose SSH session hangs mid-command (its crictl leaves a process of a session of its
    own holding the read's output, past every section's deadline, as a stuck child does) ends at the
    read's deadline (10 s here), is named in one sentence, and the rest of the fleet is reported."""
    nodes, _, root = simulated
    key, pubkey = simnodes.keypair(root)
    hung = Node(
        "gpu-hung",
        "2.4.2",
        before=[
            write_file("/run/crictl-stuck", "#!/bin/sh\nsetsid sleep 600 &\nexec sleep 600\n"),
            "chmod +x /run/crictl-stuck",
        ],
        knobs={"crictl_binary": "/run/crictl-stuck"},
    )
    try:
        simnodes.start(hung, root, pubkey)
        healthy = next(n for n in nodes if n.name == "gpu-healthy")
        os.makedirs(os.path.join(root, "hung"))
        path = nodesfiles.nodes_file([healthy, hung], key, os.path.join(root, "hung", "nodes.yaml"), {})
        report = os.path.join(root, "hung", "fleet.json")
        started = time.monotonic()
        run = deploy(
            None,
            f"report={report}",
            "node_read_timeout_s=10",
            env={"GPUOP_NODES": path},
            inventory="nodes.py",
            script="audit.py",
            timeout_s=120,
        )
        took = time.monotonic() - started
    finally:
        simnodes.stop(hung)
    assert run.code != 0 and took < 40, (took, run.log[-3000:])
    with open(report) as f:
        got = json.load(f)
    assert list(got["nodes"]) == ["gpu-healthy"] and got["nodes"]["gpu-healthy"]["gaps"] == []
    assert got["unread"] == ["ssh-gpu-hung"]
    assert "not read, so not judged: ssh-gpu-hung" in run.log
    said = [
        line for line in run.log.splitlines() if "[ssh-gpu-hung]" in line and "within node_read_timeout_s=10s" in line
    ]
    assert said, run.log[-3000:]
    assert "Traceback" not in run.log


def audited_alone(simulated, node: Node) -> tuple:
    """``node`` started beside the fleet, audited alone (a nodes file of its own), then stopped:
    the run and its report."""
    _, _, root = simulated
    key, pubkey = simnodes.keypair(root)
    folder = os.path.join(root, f"audit-{node.name}")  # beside the node's own folder, root/NAME
    try:
        simnodes.start(node, root, pubkey)
        os.makedirs(folder)
        path = nodesfiles.nodes_file([node], key, os.path.join(folder, "nodes.yaml"), {})
        report = os.path.join(folder, "fleet.json")
        run = deploy(
            None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py", timeout_s=120
        )
    finally:
        simnodes.stop(node)
    with open(report) as f:
        return run, json.load(f)


def test_a_node_whose_crictl_hangs_is_judged_on_the_rest_its_loaded_view_named_unread(simulated):
    """A node whose crictl never answers (a crictl that sleeps, in its /run): its read goes on past
    it (crictl's deadline, 10 s), and the node is judged on its files and its restart's forecast,
    the loaded view named as not read, not taken for a runtime whose CRI is down."""
    hung = Node(
        "gpu-crictl-hung",
        "2.4.2",
        before=[write_file("/run/crictl-hung", "#!/bin/sh\nexec sleep 600\n"), "chmod +x /run/crictl-hung"],
        knobs={"crictl_binary": "/run/crictl-hung"},
    )
    run, got = audited_alone(simulated, hung)
    assert got["unread"] == [], run.log[-3000:]
    entry = got["nodes"]["gpu-crictl-hung"]
    assert (entry["loaded_from"], entry["loaded"], entry["cri_after_restart"]) == ("crictl-hung", [], "ok")
    assert sorted(g["kind"] for g in entry["gaps"]) == ["no-node-object", "view-unread"], entry["gaps"]
    (unread,) = [g for g in entry["gaps"] if g["kind"] == "view-unread"]
    assert unread["detail"] == (
        "what containerd 2.4.2 holds was not read: crictl did not answer within 10s (crictl "
        "itself hung, past its own 3 s deadline): nothing is judged against the loaded view, "
        "the rest is"
    )


def test_a_node_whose_cdi_spec_blocks_reads_is_judged_on_the_rest_its_cdi_named_unread(simulated):
    """A node whose CDI spec directory holds a file that blocks reads (a FIFO in /var/run/cdi, which
    containerd 1.7 with CDI off never opens, as a file on a hung mount reads): its cdi section ends
    at its own deadline (10 s), named unread; the node is judged on every other section, and the
    read goes on to the next (nvidia)."""
    stuck = Node("gpu-cdi-stuck", "1.7.35", before=["mkdir -p /run/cdi", "mkfifo /run/cdi/stuck.yaml"])
    run, got = audited_alone(simulated, stuck)
    assert got["unread"] == [], run.log[-3000:]
    entry = got["nodes"]["gpu-cdi-stuck"]
    assert (entry["loaded_from"], entry["cri_after_restart"]) == ("cri", "ok"), entry
    assert entry["written"] == entry["loaded"] == entry["after_restart"] == ["runc"], entry
    assert sorted(g["kind"] for g in entry["gaps"]) == ["no-node-object", "view-unread"], entry["gaps"]
    (unread,) = [g for g in entry["gaps"] if g["kind"] == "view-unread"]
    assert (unread["subject"], unread["views"]) == ("containerd", ["loaded"])
    assert unread["detail"].startswith(
        "the CDI specs in the spec directories of containerd 1.7.35 were not read: their read did not end within 10s"
    ), unread


def test_a_cluster_that_cannot_be_read_is_named(simulated):
    _, path, _ = simulated
    run = deploy(
        None, "kube_context=no-such-context", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py"
    )
    assert run.code != 0
    assert "the cluster cannot be read (kubeconfig" in run.log and "context no-such-context" in run.log


def test_an_api_server_that_stalls_ends_the_read_within_its_deadline_in_one_sentence(simulated):
    """A stalled API server (SIGSTOP: it accepts connections and never answers) ends the fleet's
    cluster read at its deadline, said in one sentence: no traceback, no client retries. (Among
    the last: the lab's heal after it drops the fleet's Nodes, strays to the lab.)"""
    _, path, _ = simulated
    with open(component_pidfile("kube-apiserver")) as f:
        apiserver = int(f.read())
    os.kill(apiserver, signal.SIGSTOP)
    stopped_at = int(time.time())
    try:
        started = time.monotonic()
        run = deploy(None, env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py", timeout_s=120)
        took = time.monotonic() - started
    finally:
        os.kill(apiserver, signal.SIGCONT)
        lab_up(disturbed_at=stopped_at)  # a controller that lost its lease meanwhile is started again
    assert run.code != 0
    assert took < 30, took
    said = [line for line in run.log.splitlines() if "the cluster cannot be read (kubeconfig " in line]
    assert said, run.log
    assert all(
        line.endswith(
            (
                "the API server did not complete a connection within 5s (it accepts, then stalls)",
                "the API server gave no answer within the read's 20s",
            )
        )
        for line in said
    ), said
    assert "Traceback" not in run.log and "Retrying" not in run.log, run.log


def test_two_hosts_on_one_node_name_are_refused_by_name(simulated):
    _, path, root = simulated
    with open(path) as f:
        doc = yaml.safe_load(f)
    doc["hosts"] = {
        "ssh-a": {**doc["hosts"]["ssh-gpu-healthy"], "node_name": "gpu-healthy"},
        "ssh-b": {**doc["hosts"]["ssh-gpu-v2-dropin"], "node_name": "gpu-healthy"},
    }
    twins = os.path.join(root, "nodes-twins.yaml")
    with open(twins, "w") as f:
        yaml.safe_dump(doc, f)
    run = deploy(None, env={"GPUOP_NODES": twins}, inventory="nodes.py", script="audit.py")
    assert run.code != 0
    assert (
        "hosts ssh-a and ssh-b both audit node gpu-healthy: set node_name for each" in run.log
        or "hosts ssh-b and ssh-a both audit node gpu-healthy: set node_name for each" in run.log
    )
