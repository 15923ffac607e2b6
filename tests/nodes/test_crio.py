"""The audit of CRI-O nodes: simulated nodes (own mount, pid and UTS namespaces) running the lab's
real CRI-O 1.36.3 (lab/build.sh crio) with no flags, as systemd starts it, read over SSH, each
with a kwok Node and Pods bound to it; one runs a containerd too, and its kubelet's endpoint
decides which runtime is the node's."""

import json
import os
import re

import pytest

from gpuop.judgment import crio
from gpuop.judgment.cluster import ready
from tests.helpers import fleetobjects, nodesfiles, simnodes
from tests.helpers.crionodes import CONF, CTK_CRIO
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.playbook import deploy
from tests.helpers.simnodes import CRIO_CONF, CRIO_SOCKET, Node

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

HOOKS = "/etc/containers/oci/hooks.d"  # one of CRI-O's OCI hook directories


def planted():
    return [
        # the incident in CRI-O's form: nvidia-ctk's drop-in written after the daemon started
        Node(
            "crio-incident", "2.4.2", crio={CONF: CRIO_CONF}, nvidia_runtime=True, nvidia_ctk="1.20.2", after=[CTK_CRIO]
        ),
        # the same drop-in there before it started: loaded
        Node(
            "crio-healthy", "2.4.2", crio={CONF: CRIO_CONF}, nvidia_runtime=True, nvidia_ctk="1.20.2", before=[CTK_CRIO]
        ),
        # the GPU Operator's way on CRI-O without CDI: no handler, NVIDIA's OCI hook for every container
        Node(
            "crio-hook",
            "2.4.2",
            cdi_pod=True,
            nvidia_runtime=True,
            crio={CONF: CRIO_CONF, "/etc/crio/crio.conf.d/10-hooks.conf": f'[crio.runtime]\nhooks_dir = ["{HOOKS}"]\n'},
            nvidia_ctk="1.20.2",
            before=[
                f"mkdir -p {HOOKS}",
                f"nvidia-ctk runtime configure --runtime=crio --config-mode=oci-hook "
                f"--oci-hook-path={HOOKS}/oci-nvidia-hook.json 2>/dev/null",
            ],
        ),
        # the toolkit's drop-in naming a runtime binary the node lacks: CRI-O's next start drops it
        Node("crio-no-binary", "2.4.2", crio={CONF: CRIO_CONF}, nvidia_ctk="1.20.2", before=[CTK_CRIO]),
        # the incident on a node with no crictl: CRI-O's own status API says what it holds
        Node(
            "crio-no-crictl",
            "2.4.2",
            crio={CONF: CRIO_CONF},
            nvidia_runtime=True,
            nvidia_ctk="1.20.2",
            after=[CTK_CRIO],
            knobs={"crictl_binary": "/nonexistent/crictl"},
        ),
        # a containerd beside CRI-O: kubelet's endpoint (CRI-O's socket) says which is the node's
        Node(
            "crio-and-containerd",
            "2.4.2",
            crio={CONF: CRIO_CONF},
            nvidia_runtime=True,
            nvidia_ctk="1.20.2",
            before=[CTK_CRIO],
            containerd_too=True,
            kubelet=f"unix://{CRIO_SOCKET}",
        ),
    ]


EXPECTED = {
    "crio-incident": [
        ("handler-not-loaded", "nvidia"),
        ("sandbox-fails", "gpuop-fleet/gpu-crio-incident"),
        ("gpu-advertised-not-loaded", "crio-incident"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "crio-no-crictl": [
        ("handler-not-loaded", "nvidia"),
        ("sandbox-fails", "gpuop-fleet/gpu-crio-no-crictl"),
        ("gpu-advertised-not-loaded", "crio-no-crictl"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "crio-healthy": [],
    # its Pod of the nvidia RuntimeClass cannot start (drop runtimeClassName: NVSentinel#442); the
    # GPU Pod with no class gets its GPU from the hook
    "crio-hook": [("sandbox-fails", "gpuop-fleet/gpu-crio-hook")],
    # its start dropped nvidia already (a warning in its log), and its next one will too
    "crio-no-binary": [
        ("handler-not-loaded", "nvidia"),
        ("restart-drops-runtime", "nvidia"),
        ("sandbox-fails", "gpuop-fleet/gpu-crio-no-binary"),
        ("gpu-advertised-not-loaded", "crio-no-binary"),
        ("toolkit-ready-not-loaded", "toolkit"),
    ],
    "crio-and-containerd": [("second-containerd", "pid")],
}


def _subject(gap):
    if gap["kind"] == "toolkit-ready-not-loaded":
        return "toolkit"
    return "pid" if gap["kind"].startswith("second-") else gap["subject"]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("crio"))
    nodes = planted()
    with simnodes.fleet(nodes, root) as key:
        path = nodesfiles.nodes_file(nodes, key, os.path.join(root, "nodes.yaml"), {})
        before = {n.name: simnodes.node_files(n) for n in nodes}
        report = os.path.join(root, "fleet.json")
        run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
        after = {n.name: simnodes.node_files(n) for n in nodes}
        assert os.path.exists(report), run.log[-4000:]
        with open(report) as f:
            yield run, json.load(f), before, after


def test_the_audit_names_exactly_the_planted_gaps_in_cri_os_words(audited):
    run, doc, _, _ = audited
    assert run.code != 0, "a fleet with gaps must fail the run"
    found = {name: sorted((g["kind"], _subject(g)) for g in entry["gaps"]) for name, entry in doc["nodes"].items()}
    assert found == {name: sorted(gaps) for name, gaps in EXPECTED.items()}
    nodes = doc["nodes"]
    incident = next(g for g in nodes["crio-incident"]["gaps"] if g["kind"] == "sandbox-fails")
    assert incident["detail"].endswith(
        "cri-o 1.36.3 says: failed to find runtime handler nvidia from runtime list "
        "map[runc:<ptr>]; no kubelet event for it yet"
    ), incident  # a kwok Node
    dropped = next(g for g in nodes["crio-no-binary"]["gaps"] if g["kind"] == "restart-drops-runtime")
    assert "runtime nvidia's binary (/usr/bin/nvidia-container-runtime) is missing" in dropped["detail"]


def test_each_cri_o_is_read_from_itself(audited):
    run, doc, _, _ = audited
    nodes = doc["nodes"]
    for name, e in nodes.items():
        assert (e["runtime"], e["version"]) == (crio.NAME, "1.36.3"), name
        assert e["daemon"]["config"] == CONF and e["daemon"]["address"] == CRIO_SOCKET, name
        assert e["loaded_from"] == ("status" if name == "crio-no-crictl" else "cri"), name
        assert e["cri_after_restart"] == "ok", name
    incident, healthy = nodes["crio-incident"], nodes["crio-healthy"]
    assert nodes["crio-no-crictl"]["loaded"] == incident["loaded"] == ["runc"]  # its status API: the same answer
    (unloaded,) = [g for g in nodes["crio-no-crictl"]["gaps"] if g["kind"] == "handler-not-loaded"]
    assert unloaded["detail"].endswith("(loaded, live from cri-o 1.36.3's own status (no crictl on the node))")
    assert incident["written"] == ["runc", "nvidia"] and incident["loaded"] == ["runc"]
    assert sorted(incident["after_restart"]) == ["nvidia", "runc"]  # crun: not on the node, dropped at start
    assert sorted(healthy["loaded"]) == sorted(healthy["after_restart"]) == ["nvidia", "runc"]
    assert healthy["gpu_path"] == ["handler"] and nodes["crio-hook"]["gpu_path"] == ["oci-hook"]
    assert nodes["crio-hook"]["cdi"]["enabled"] is True  # CRI-O resolves CDI always
    assert nodes["crio-no-binary"]["loaded"] == ["runc"]  # its start dropped nvidia already
    both = nodes["crio-and-containerd"]
    assert both["kubelet_endpoint"] == CRIO_SOCKET
    (second,) = [g for g in both["gaps"] if g["kind"] == "second-containerd"]
    assert "containerd also runs" in second["detail"] and "/run/containerd/containerd.sock" in second["detail"]
    row = next(line for line in run.log.splitlines() if line.split()[:1] == ["crio-incident"])
    assert row.split()[1:3] == ["cri-o", "1.36.3"]


def test_the_audit_writes_nothing_on_a_cri_o_node(audited):
    _, _, before, after = audited
    for name in before:
        assert after[name] == before[name], name


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A CRI-O node whose real kubelet registers it in the lab cluster, and a GPU Pod of the
    nvidia RuntimeClass bound to it while its CRI-O holds runc only; nothing else runs there."""
    root = str(tmp_path_factory.mktemp("crio-kubelet"))
    node = Node("crio-kubelet", "2.4.2", crio={CONF: CRIO_CONF}, kubelet=f"unix://{CRIO_SOCKET}", registered=True)
    with simnodes.running([node], root) as key:
        eventually(
            f"node {node.name}'s kubelet to register it Ready",
            lambda: ready(get(f"node/{node.name}") or {}),
            timeout=120,
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"gpu-{node.name}", "namespace": fleetobjects.NAMESPACE},
            "spec": {
                "nodeName": node.name,
                "runtimeClassName": "fleet-nvidia",
                "tolerations": [{"key": fleetobjects.MARK, "operator": "Exists"}],
                "containers": [{"name": "cuda", "image": "cuda:12"}],
            },
        }
        docs = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fleetobjects.NAMESPACE}},
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": "fleet-nvidia"},
                "handler": "nvidia",
            },
            pod,
        ]
        kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(d) for d in docs))

        def failed():
            events = get(
                "events",
                fleetobjects.NAMESPACE,
                fieldSelector=f"involvedObject.name={pod['metadata']['name']},reason=FailedCreatePodSandBox",
            )
            return (events or {}).get("items")

        events = eventually("the kubelet's FailedCreatePodSandBox event", failed, timeout=120)
        report = os.path.join(root, "fleet.json")
        run = deploy(
            None,
            f"report={report}",
            env={"GPUOP_NODES": nodesfiles.nodes_file([node], key, os.path.join(root, "nodes.yaml"), {})},
            inventory="nodes.py",
            script="audit.py",
        )
        assert os.path.exists(report), run.log[-4000:]
        with open(report) as f:
            yield events, json.load(f)


def test_the_kubelets_event_on_cri_o_is_the_forecast(registered):
    events, doc = registered
    said = events[-1]["message"]
    assert re.fullmatch(
        r"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to find runtime handler "
        r"nvidia from runtime list map\[runc:0x[0-9a-f]+\]",
        said,
    ), said
    entry = doc["nodes"]["crio-kubelet"]
    assert entry["runtime"] == crio.NAME and entry["runtime_handlers"] == ["", "runc"]  # CRI-O reports its handlers
    (fails,) = [g for g in entry["gaps"] if g["kind"] == "sandbox-fails"]
    assert fails["detail"].endswith(
        "cri-o 1.36.3 says: failed to find runtime handler nvidia from runtime list "
        "map[runc:<ptr>]; the kubelet's event agrees"
    ), fails
