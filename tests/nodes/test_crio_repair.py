"""The fleet repair (``pyinfra nodes.py fix.py``) on CRI-O nodes: simulated nodes running the
lab's real CRI-O 1.36.3 with no flags, whose real kubelets register them in the lab cluster; a
Deployment's GPU Pod of RuntimeClass fleet-nvidia pinned to each, whose sandbox CRI-O refuses.
The incident (nvidia-ctk's drop-in written after CRI-O started) needs a restart only; a node with
no drop-in gets nvidia-ctk's own (``--runtime=crio``), then the restart; a node reloaded after the
drop-in (SIGHUP), whose status names nvidia while its sandboxes refuse it (cri-o#10202), is named
by the audit from the kubelet's event and restarted; each proven by CRI, the kubelet and a probe
Pod that runs through the handler. Read through the cluster (a privileged read Pod on each node,
run by its CRI-O), the nodes say what they say over SSH; on a machine whose processes may not hold
every capability its kernel knows, where CRI-O cannot start a privileged container, the audit
names that in runc's words, on one line."""

import json
import os

import pytest

from gpuop.judgment import crio
from tests.helpers import simnodes
from tests.helpers.clusterreach import audit
from tests.helpers.crionodes import CONF, CTK_CRIO, DROPIN
from tests.helpers.fleetobjects import NAMESPACE
from tests.helpers.kube import eventually, get
from tests.helpers.layouts import write_file
from tests.helpers.playbook import deploy
from tests.helpers.repairs import backups, registered, running, work_pods
from tests.helpers.simnodes import CRIO_CONF, CRIO_SOCKET, Node

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

RESTART = {"crio_restart": "pkill -x crio"}  # its supervisor starts it again, as systemd would
NOTE = "# the operator's: nothing set here yet\n"  # crio-fix-ctk's drop-in before the repair


def every_capability() -> bool:
    """Whether this machine's processes may hold every capability its kernel knows. CRI-O gives a
    privileged container all of them (runtime-tools' ``SetupPrivileged``), not its own, and runc
    cannot where the bounding set lacks one (this machine's lacks CAP_SYS_RESOURCE)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    with open("/proc/self/status") as f:
        bounding = int(next(line.split()[1] for line in f if line.startswith("CapBnd:")), 16)
    return bounding == (1 << (last + 1)) - 1


def planted():
    common = {
        "crio": {CONF: CRIO_CONF},
        "kubelet": f"unix://{CRIO_SOCKET}",
        "registered": True,
        "nvidia_runtime": True,
        "nvidia_ctk": "1.20.2",
        "supervised": True,
        "knobs": RESTART,
    }
    return [
        Node("crio-fix-incident", "2.4.2", after=[CTK_CRIO], **common),  # written, not loaded
        # no runtime written (an operator's note where the drop-in goes): the toolkit's drop-in, then the restart
        Node(
            "crio-fix-ctk", "2.4.2", before=[f"mkdir -p {os.path.dirname(DROPIN)}", write_file(DROPIN, NOTE)], **common
        ),
        # written, then reloaded: its status names nvidia, its sandboxes refuse it (cri-o#10202)
        Node("crio-fix-reload", "2.4.2", after=[CTK_CRIO, "pkill -HUP -x crio"], **common),
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("crio-repair"))
    nodes = planted()
    with registered(nodes, root) as path:
        yield nodes, path, root


def fix(path, *data, dry=False):
    return deploy(None, *data, env={"GPUOP_NODES": path}, inventory="nodes.py", script="fix.py", dry=dry)


def refused(pod: str) -> str:
    """The message of the kubelet's newest FailedCreatePodSandBox event for ``pod``, or ''."""
    events = get("events", NAMESPACE, fieldSelector=f"involvedObject.name={pod},reason=FailedCreatePodSandBox")["items"]
    return max(events, key=lambda e: e["lastTimestamp"] or "")["message"] if events else ""


def test_cri_o_nodes_are_restarted_into_the_handler_and_the_rerun_changes_nothing(fleet):
    nodes, path, root = fleet
    crios = {n.name: simnodes.node_runtime(n) for n in nodes}
    # the reloaded node: its status (and its Node's runtimeHandlers) name nvidia, its sandboxes refuse it
    reloaded = work_pods("crio-fix-reload")[0]["metadata"]["name"]
    eventually(
        f"the kubelet's refusal of {reloaded}'s sandbox",
        lambda: "failed to find runtime handler nvidia from runtime list map[runc:" in refused(reloaded),
        timeout=60,
    )
    before, found = audit(path, root)
    entry = found["nodes"]["crio-fix-reload"]
    assert "nvidia" in entry["loaded"] and [g["kind"] for g in entry["gaps"]] == ["sandbox-refuses-loaded"], before.log[
        -3000:
    ]
    assert (
        "a reload (SIGHUP) reaches CRI-O's status, not its sandboxes (cri-o#10202); a restart loads it"
        in entry["gaps"][0]["detail"]
    )
    plan = fix(path, dry=True)
    assert plan.code == 0, plan.log[-4000:]
    assert (
        "crio-fix-incident: repair: nvidia is written and a restart of cri-o 1.36.3 loads it "
        "(its own merge of the files); the running daemon does not hold it"
    ) in plan.log, plan.log[-4000:]
    assert (
        f"crio-fix-ctk:   write {DROPIN}, by nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk) (the file before kept under "
        "/var/lib/gpuop/backup, where no runtime reads):"
    ) in plan.log, plan.log[-4000:]
    assert "crio-fix-ctk:     -# the operator's: nothing set here yet" in plan.log
    assert (
        "crio-fix-reload: repair: nvidia is written and a restart of cri-o 1.36.3 loads it (its own merge of "
        f"the files); the running daemon's status names it, its sandboxes refuse it ({NAMESPACE}/{reloaded})"
    ) in plan.log
    assert "crio-fix-ctk:   restart cri-o 1.36.3, prove it (CRI, kubelet Ready, a probe Pod), uncordon" in plan.log
    with open(f"/proc/{simnodes.ns_pid(nodes[1])}/root{DROPIN}") as f:
        assert f.read() == NOTE  # --dry wrote nothing

    confd = sorted(os.listdir(f"/proc/{simnodes.ns_pid(nodes[1])}/root{os.path.dirname(DROPIN)}"))
    assert "99-nvidia.toml" in confd
    report = os.path.join(root, "repair.json")
    run = fix(path, f"report={report}")
    assert run.code == 0, run.log[-4000:]
    with open(report) as f:
        doc = json.load(f)
    assert {
        name: (n["runtime"], n["outcome"], [(f["path"], f["by"]) for f in n["files"]])
        for name, n in doc["nodes"].items()
    } == {
        "crio-fix-incident": (crio.NAME, "repaired", []),
        "crio-fix-ctk": (crio.NAME, "repaired", [(DROPIN, "nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk)")]),
        "crio-fix-reload": (crio.NAME, "repaired", []),
    }
    assert "a probe Pod of RuntimeClass fleet-nvidia ran there" in run.log
    # the note kept where CRI-O never reads (it merges every file of crio.conf.d, whatever its name)
    ctk = next(n for n in nodes if n.name == "crio-fix-ctk")
    (kept,) = backups(ctk)
    assert kept.startswith("/var/lib/gpuop/backup/") and kept.endswith(DROPIN), kept
    with open(f"/proc/{simnodes.ns_pid(ctk)}/root{kept}") as f:
        assert f.read() == NOTE
    assert sorted(os.listdir(f"/proc/{simnodes.ns_pid(ctk)}/root{os.path.dirname(DROPIN)}")) == confd  # no copy there
    # a new daemon on each holds nvidia, and the GPU Pods run through it
    restarted = {n.name: simnodes.node_runtime(n) for n in nodes}
    assert all(restarted[name] != pid for name, pid in crios.items()), (crios, restarted)
    assert {name: (e["gaps"], sorted(e["loaded"])) for name, e in doc["audit_after"]["nodes"].items()} == {
        name: ([], ["nvidia", "runc"]) for name in crios
    }
    for n in nodes:
        eventually(f"work-{n.name}'s GPU Pod running", lambda: running(f"work-{n.name}"), timeout=120)
        with open(os.path.join(n.dir, "nvidia-container-runtime.log")) as f:
            assert " create " in f" {f.read()} "  # the handler's runtime made its containers

    again = fix(path, f"report={report}")
    assert again.code == 0 and again.changed == 0, again.log[-3000:]
    with open(report) as f:
        assert {n["outcome"] for n in json.load(f)["nodes"].values()} == {"nothing to do"}
    assert {n.name: simnodes.node_runtime(n) for n in nodes} == restarted


@pytest.mark.skipif(
    not every_capability(),
    reason="CRI-O cannot start a privileged container here: this machine's "
    "capability bounding set lacks one its kernel knows",
)
def test_through_the_cluster_cri_o_nodes_say_what_they_say_over_ssh(fleet):
    nodes, path, root = fleet
    _, over_ssh = audit(path, root)
    run, through = audit(path, root, "reach=cluster")
    assert through["unread"] == [] and through["nodes"] == over_ssh["nodes"], run.log[-3000:]


@pytest.mark.skipif(
    every_capability(),
    reason="this machine's processes may hold every capability: CRI-O starts the read Pod (the test above)",
)
def test_a_read_pod_cri_o_cannot_start_is_named_in_runcs_words_on_one_line(fleet):
    nodes, path, root = fleet
    run, through = audit(path, root, "reach=cluster", "node_read_timeout_s=20")
    assert sorted(through["unread"]) == sorted(f"@kubenode/{n.name}" for n in nodes), run.log[-3000:]
    for n in nodes:
        said = [
            line
            for line in run.log.splitlines()
            if f"on node {n.name} did not complete within 20s: phase Pending, container waiting: " in line
        ]
        assert (
            said
            and (
                "CreateContainerError (container create failed: runc create failed: unable to start "
                "container process: unable to apply caps: operation not permitted)"
            )
            in said[-1]
        ), run.log[-3000:]
    assert "level=warning" not in run.log  # runc's warnings are not the reason
