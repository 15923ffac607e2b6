"""The fleet repair (``pyinfra nodes.py fix.py``) on real kubelets: four simulated nodes, each in
its own mount, pid and UTS namespaces with its own containerd (supervised, as systemd's
Restart=always: the node's restart command kills it), whose kubelet registers it in the lab
cluster; a Deployment's GPU Pod pinned to each, of RuntimeClass fleet-nvidia. One node at a time,
from the audit's own judgment: the incident on 1.6.20, nvidia-ctk's drop-in unrestarted on 1.7.35
and a 2.3.3 whose config imports nothing (the toolkit's CLI installed) are drained, fixed,
restarted, proven by a probe Pod and put back; the healthy 2.4.2 is never touched."""

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime

import pytest
import tomli_w

from gpuop.judgment.configs import nvidia_dropin
from gpuop.repair.lease import LEASE
from gpuop.repair.plan import CORDONED_BY, REPAIR_FAILED
from tests.helpers import layouts, simnodes
from tests.helpers.fleetobjects import NAMESPACE
from tests.helpers.kube import eventually, get, kubectl
from tests.helpers.kubelets import READ_IMAGE
from tests.helpers.layouts import CONFIG, DROPIN, write_file
from tests.helpers.playbook import PYINFRA, deploy
from tests.helpers.proc import Started
from tests.helpers.repairs import ENDPOINT, RESTART, backups, deployment, registered, running, work_pods
from tests.helpers.simnodes import Node

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini


def planted():
    common = {"kubelet": ENDPOINT, "registered": True, "supervised": True, "nvidia_runtime": True, "knobs": RESTART}
    return [
        Node("fix-incident", "1.6.20", after=[write_file(DROPIN, tomli_w.dumps(nvidia_dropin()))], **common),
        Node("fix-ctk", "1.7.35", after=[layouts.nvidia_ctk_configure()], **common),
        Node("fix-healthy", "2.4.2", before=[layouts.nvidia_ctk_configure()], **common),
        Node("fix-noimports", "2.3.3", imports="", nvidia_ctk="1.20.2", **common),
        # k3s-like: the toolkit wrote nvidia into the config.toml k3s writes anew from its template
        Node("fix-k3s", "2.4.2", k3s_template=K3S_TEMPLATE_TAIL, before=[append(CONFIG, NVIDIA_TABLES)], **common),
    ]


# An operator's full template for k3s: the node's config and a setting of theirs, no nvidia runtime.
K3S_TEMPLATE_TAIL = '\n[debug]\n  level = "info"\n'
NVIDIA_TABLES = tomli_w.dumps(nvidia_dropin()).split("\n", 1)[1]  # its runtime's tables, without its version


def append(path: str, text: str) -> str:
    return f"printf %s {base64.b64encode(text.encode()).decode()} | base64 -d >>{path}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("repair"))
    nodes = planted()
    with registered(nodes, root, awaited=("work-fix-healthy", "steady-fix-ctk")) as path:
        yield nodes, path, root


# A Pod no controller owns, on fix-ctk: nothing would bring it back, so it stops that node's drain.
BARE_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "bare", "namespace": NAMESPACE},
    "spec": {
        "nodeName": "fix-ctk",
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "c", "image": READ_IMAGE, "command": ["/bin/sh", "-c", "sleep 3600"]}],
    },
}


def incident_again(node):
    """The seed's drop-in over the repaired one on ``node``, its daemon still holding nvidia: a
    restart would take CRI down."""
    with open(f"/proc/{simnodes.ns_pid(node)}/root{DROPIN}", "w") as f:
        f.write(tomli_w.dumps(nvidia_dropin()))


def fix(path, *data, dry=False):
    return deploy(None, *data, env={"GPUOP_NODES": path}, inventory="nodes.py", script="fix.py", dry=dry)


def test_the_plan_first_changes_nothing(fleet):
    nodes, path, root = fleet
    before = {n.name: simnodes.etc_containerd(n) for n in nodes}
    containerds = {n.name: simnodes.node_containerd(n) for n in nodes}
    run = fix(path, dry=True)
    assert "fix-incident: repair: a restart takes CRI down" in run.log, run.log[-3000:]
    assert (
        "fix-incident:   write /etc/containerd/conf.d/99-nvidia.toml, by gpuop (the file before kept under "
        "/var/lib/gpuop/backup, where no runtime reads):" in run.log
    )
    # no imports: one line added to the config; the drop-in the node's own nvidia-ctk would write
    assert (
        "fix-noimports:   write /etc/containerd/config.toml, by gpuop (an import of the drop-in's directory) "
        "(the file before kept under /var/lib/gpuop/backup, where no runtime reads):"
    ) in run.log, run.log[-3000:]
    assert 'fix-noimports:     +imports = ["/etc/containerd/conf.d/*.toml"]' in run.log
    assert (
        "fix-noimports:   write /etc/containerd/conf.d/99-nvidia.toml, by nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk):"
        in run.log
    )
    # k3s: its template, never the file it writes anew
    assert (
        "fix-k3s:   write /etc/containerd/config.toml.tmpl, by gpuop (the template k3s renders "
        "/etc/containerd/config.toml from at its start; /etc/containerd/config.toml itself is never written) "
        "(the file before kept under /var/lib/gpuop/backup, where no runtime reads):"
    ) in run.log, run.log[-3000:]
    assert "fix-ctk: repair: nvidia is written and a restart loads it with CRI up" in run.log
    assert "fix-healthy: nothing to do: nvidia is loaded now and after a restart" in run.log
    assert {n.name: simnodes.etc_containerd(n) for n in nodes} == before
    assert {n.name: simnodes.node_containerd(n) for n in nodes} == containerds
    assert not any(get(f"node/{n.name}")["spec"].get("unschedulable") for n in nodes)


def test_a_pod_no_controller_owns_stops_the_drain_and_the_rollout_named(fleet):
    """A bare Pod on the first node to repair: its drain stops there, named; the node is put back
    untouched, and the node after it (the incident's) is not touched at all."""
    nodes, path, root = fleet
    kubectl("apply", "-f", "-", stdin=json.dumps(BARE_POD))
    containerds = {n.name: simnodes.node_containerd(n) for n in nodes}
    files = {n.name: simnodes.etc_containerd(n) for n in nodes}
    try:
        run = fix(path)
    finally:
        kubectl("delete", "pod", "bare", "-n", NAMESPACE, "--grace-period=0", "--force", "--ignore-not-found")
    assert run.code != 0
    # the inventory's order (by name): fix-ctk first, the rollout stops there
    assert (
        "the repair stopped: node fix-ctk, step drain: drain of fix-ctk: Pod(s) gpuop-fleet/bare "
        "are owned by no controller"
    ) in run.log, run.log[-3000:]
    assert "node fix-incident untouched: the rollout stopped at node fix-ctk, step drain" in run.log, run.log[-3000:]
    # the node back in service untouched, the nodes after it untouched
    assert not get("node/fix-ctk")["spec"].get("unschedulable")
    assert {n.name: simnodes.node_containerd(n) for n in nodes} == containerds
    assert {n.name: simnodes.etc_containerd(n) for n in nodes} == files
    assert get("leases", "default", fieldSelector="metadata.name=gpuop-fleet-repair")["items"] == []


def test_a_second_run_on_the_cluster_is_refused_by_name(fleet):
    """Another run holds the repair's Lease, renewed just now: this one touches nothing."""
    nodes, path, root = fleet
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": "default"},
        "spec": {"holderIdentity": "gpuop on ops-2 pid 77", "leaseDurationSeconds": 60, "renewTime": now},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(lease))
    containerds = {n.name: simnodes.node_containerd(n) for n in nodes}
    try:
        run = fix(path)
    finally:
        kubectl("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")
    assert run.code != 0
    assert (
        "the repair stopped at the lock: another repair runs on this cluster: Lease default/gpuop-fleet-repair "
        "is held by gpuop on ops-2 pid 77, renewed"
    ) in run.log, run.log[-3000:]
    assert {n.name: simnodes.node_containerd(n) for n in nodes} == containerds
    assert not any(get(f"node/{n.name}")["spec"].get("unschedulable") for n in nodes)


def test_a_budget_that_blocks_stops_the_rollout_and_a_run_killed_mid_drain_is_finished_by_the_next(fleet):
    """A PodDisruptionBudget that allows no disruption of the first node's GPU Pod: the drain gives
    up at drain_timeout_s naming it, the node back in service untouched. Then a run killed while
    that drain waits: the next run, the budget gone, finds the node gpuop cordoned and repairs it."""
    nodes, path, root = fleet
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "hold", "namespace": NAMESPACE},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "steady-fix-ctk"}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(pdb))
    eventually(
        "the budget to count its Pod",
        lambda: (get("poddisruptionbudget/hold", NAMESPACE).get("status") or {}).get("currentHealthy") == 1,
        timeout=30,
    )
    files = {n.name: simnodes.etc_containerd(n) for n in nodes}
    run = fix(path, "drain_timeout_s=6")
    assert run.code != 0
    said = next(line for line in run.log.splitlines() if "the repair stopped: node fix-ctk, step drain" in line)
    assert (
        "the eviction of Pod gpuop-fleet/steady-fix-ctk-" in said
        and "not within 6s; last seen: Pod gpuop-fleet/steady-fix-ctk-" in said
        and "held by PodDisruptionBudget gpuop-fleet/hold (disruptions allowed: 0)" in said
    ), said
    assert not get("node/fix-ctk")["spec"].get("unschedulable")  # back in service, untouched
    assert {n.name: simnodes.etc_containerd(n) for n in nodes} == files
    # a run killed while the budget holds its drain
    proc = subprocess.Popen(
        [PYINFRA, "nodes.py", "fix.py", "-y", "--data", "drain_timeout_s=300"],
        env={**os.environ, "GPUOP_NODES": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        eventually(
            "the killed run's cordon",
            lambda: CORDONED_BY in get("node/fix-ctk")["metadata"].get("annotations", {}),
            timeout=60,
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    kubectl("delete", "pdb", "hold", "-n", NAMESPACE)
    assert get("node/fix-ctk")["spec"].get("unschedulable")  # left cordoned by the killed run, with its Lease


def test_the_fleet_is_repaired_one_node_at_a_time_and_the_rerun_changes_nothing(fleet):
    nodes, path, root = fleet
    healthy = next(n for n in nodes if n.name == "fix-healthy")
    healthy_pod = work_pods("fix-healthy")[0]["metadata"]["uid"]
    healthy_containerd = simnodes.node_containerd(healthy)
    report, textfile = os.path.join(root, "repair.json"), os.path.join(root, "repair.prom")
    trees = {n.name: (simnodes.etc_containerd(n), simnodes.tree(os.path.join(n.dir, "usr-bin"))) for n in nodes}
    run = fix(path, f"report={report}", f"textfile={textfile}")
    assert run.code == 0, run.log[-4000:]
    with open(report) as f:
        doc = json.load(f)
    assert {
        name: (n["action"], n["outcome"], [(f["path"], f["by"]) for f in n["files"]])
        for name, n in doc["nodes"].items()
    } == {
        "fix-ctk": ("repair", "repaired", []),
        "fix-healthy": ("none", "nothing to do", []),
        "fix-incident": ("repair", "repaired", [(DROPIN, "gpuop")]),
        "fix-noimports": (
            "repair",
            "repaired",
            [
                (CONFIG, "gpuop (an import of the drop-in's directory)"),
                (DROPIN, "nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk)"),
            ],
        ),
        "fix-k3s": (
            "repair",
            "repaired",
            [
                (
                    CONFIG + ".tmpl",
                    "gpuop (the template k3s renders /etc/containerd/config.toml "
                    "from at its start; /etc/containerd/config.toml itself is never written)",
                )
            ],
        ),
    }
    # on each node, nothing changed but the planned files and their backups
    for n in nodes:
        etc, usr_bin = trees[n.name]
        planned = {os.path.relpath(f["path"], "/etc/containerd") for f in doc["nodes"][n.name]["files"]}
        if n.k3s_template:  # and the config k3s-like rendered from the template at the restart
            planned.add("config.toml")
        now = simnodes.etc_containerd(n)
        changed = {p for p in set(etc) | set(now) if etc.get(p) != now.get(p)}
        changed -= {p for p in changed if any(q.startswith(p + "/") for q in changed)}  # a folder, for what is in it
        assert changed == planned, (n.name, changed)  # no backup among them: none where containerd reads
        assert simnodes.tree(os.path.join(n.dir, "usr-bin")) == usr_bin
    k3s_etc = f"/proc/{simnodes.ns_pid(next(n for n in nodes if n.name == 'fix-k3s'))}/root/etc/containerd"
    with open(f"{k3s_etc}/config.toml") as rendered, open(f"{k3s_etc}/config.toml.tmpl") as template:
        assert rendered.read() == template.read()  # written by the render, from the template gpuop extended
    assert not [p for p in os.listdir(k3s_etc) if p.startswith("config.toml.gpuop-bak.")]  # never touched by gpuop
    assert set(doc["nodes"]["fix-incident"]["phases_s"]) == {
        "cordon",
        "drain",
        "write",
        "forecast",
        "restart",
        "CRI",
        "Ready",
        "probe",
        "uncordon",
    }
    # the fleet audited again at the run's end, by the audit's own rules: no gap left
    after = doc["audit_after"]["nodes"]
    assert {name: (e["gaps"], sorted(e["loaded"])) for name, e in after.items()} == {
        name: ([], ["nvidia", "runc"])
        for name in ("fix-ctk", "fix-healthy", "fix-incident", "fix-k3s", "fix-noimports")
    }
    assert "--> the fleet audited again after the rollout:" in run.log
    with open(textfile) as f:
        prom = f.read()
    assert 'gpuop_node_repaired{node="fix-incident",outcome="repaired"} 1.0' in prom
    assert 'gpuop_node_repaired{node="fix-healthy",outcome="nothing to do"} 1.0' in prom
    assert run.log.index("node fix-ctk: repaired") < run.log.index(
        "node fix-incident: cordoned"
    )  # one at a time, by name
    for name in ("fix-incident", "fix-ctk", "fix-noimports", "fix-k3s"):
        assert f"node {name}: repaired and back in service" in run.log
        assert f"node {name}: a probe Pod of RuntimeClass fleet-nvidia ran there" in run.log
        node = get(f"node/{name}")
        assert not node["spec"].get("unschedulable") and CORDONED_BY not in node["metadata"].get("annotations", {})
        # the evicted GPU Pod runs again, through the stand-in nvidia runtime
        eventually(f"{name}'s GPU Pod running again", lambda: running(f"work-{name}"), timeout=120)
        node_dir = next(n.dir for n in nodes if n.name == name)
        assert os.path.exists(os.path.join(node_dir, "nvidia-container-runtime.log"))  # through the handler
    incident = next(n for n in nodes if n.name == "fix-incident")
    (kept,) = backups(incident)  # the seed's drop-in, byte for byte, under the run's name, where no runtime reads
    assert kept.endswith("/etc/containerd/conf.d/99-nvidia.toml") and kept.startswith("/var/lib/gpuop/backup/"), kept
    assert doc["nodes"]["fix-incident"]["files"][0]["backup"] == kept
    with open(f"/proc/{simnodes.ns_pid(incident)}/root{kept}") as f:
        assert f.read() == tomli_w.dumps(nvidia_dropin())
    assert "node fix-healthy:" not in run.log  # never cordoned, its Pod never evicted, its containerd never restarted
    assert work_pods("fix-healthy")[0]["metadata"]["uid"] == healthy_pod
    assert simnodes.node_containerd(healthy) == healthy_containerd
    # the audit after is clean, and a rerun changes nothing
    audited = deploy(None, env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
    assert audited.code == 0, audited.log[-3000:]
    again = fix(path, f"report={report}")
    assert again.code == 0 and again.changed == 0, again.log[-3000:]
    with open(report) as f:
        assert {n["outcome"] for n in json.load(f)["nodes"].values()} == {"nothing to do"}


# Another agent's drop-in, landed while the drain waits: nothing parses it, so containerd refuses to start.
LATE = "/etc/containerd/conf.d/50-late.toml"


def test_a_forecast_that_refuses_the_files_puts_them_back_and_a_stale_lock_is_taken_over(fleet):
    """The incident planted again on fix-incident, and while its drain waits for a Pod slow to stop
    (a grace period of 10 s), a drop-in nobody can parse lands in its conf.d: the node's own merge of
    the written files refuses to start, so nothing restarts: the seed's drop-in is put back byte for
    byte from the backup (outside every directory containerd reads), the node back in service, its
    containerd the same, non-zero. The next run, that file gone, takes over the Lease a run on
    another machine left unrenewed, says so, and repairs the node."""
    nodes, path, root = fleet
    incident = next(n for n in nodes if n.name == "fix-incident")
    incident_again(incident)
    slow = deployment("slow-fix-incident", "fix-incident")
    spec = slow["spec"]["template"]["spec"]
    spec["terminationGracePeriodSeconds"] = 10
    spec["containers"][0]["command"] = ["/bin/sh", "-c", "trap '' TERM; sleep 3600 & wait; sleep 3600"]
    kubectl("apply", "-f", "-", stdin=json.dumps(slow))
    node_root = f"/proc/{simnodes.ns_pid(incident)}/root"
    try:
        eventually("the slow Pod running", lambda: running("slow-fix-incident"), timeout=120)
        with open(node_root + DROPIN, "rb") as f:
            seed = f.read()
        containerd, kept = simnodes.node_containerd(incident), backups(incident)
        result = {}
        runner = threading.Thread(target=lambda: result.update(run=fix(path)))
        runner.start()
        eventually(
            "the run's cordon of fix-incident",
            lambda: CORDONED_BY in get("node/fix-incident")["metadata"].get("annotations", {}),
            timeout=180,
        )
        with open(node_root + LATE, "w") as f:
            f.write("[plugins.\n")
        runner.join(600)
        run = result["run"]
        assert run.code != 0
        said = next(
            line for line in run.log.splitlines() if "the repair stopped: node fix-incident, step forecast" in line
        )
        assert "containerd 1.6.20's own merge of the files says a restart gives" in said, said
        assert said.endswith("not restarted, the files put back"), said
        with open(node_root + DROPIN, "rb") as f:
            assert f.read() == seed
        assert backups(incident) == kept  # this run's moved back: no copy of it left anywhere
        assert simnodes.node_containerd(incident) == containerd
        node = get("node/fix-incident")
        assert not node["spec"].get("unschedulable") and CORDONED_BY not in node["metadata"].get("annotations", {})
    finally:
        kubectl("delete", "deployment", "slow-fix-incident", "-n", NAMESPACE, "--ignore-not-found", "--wait=false")
        with contextlib.suppress(FileNotFoundError):
            os.remove(node_root + LATE)
    stale = datetime.fromtimestamp(time.time() - 300, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": "default"},
        "spec": {"holderIdentity": "gpuop on ops-2 pid 77", "leaseDurationSeconds": 60, "renewTime": stale},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(lease))
    again = fix(path)
    assert again.code == 0, again.log[-4000:]
    assert re.search(
        f"repair: the Lease default/{LEASE} taken over from a run that stopped: gpuop on ops-2 pid 77's, "
        r"not renewed for 3\d\ds \(its duration 60s\)",
        again.log,
    ), again.log[-3000:]
    assert "node fix-incident: repaired and back in service" in again.log
    assert get("leases", "default", fieldSelector=f"metadata.name={LEASE}")["items"] == []  # given back


def pod_of(app) -> dict:
    (pod,) = get("pods", NAMESPACE, labelSelector=f"app={app}")["items"]
    return pod


def test_a_pod_with_emptydir_data_stops_the_drain_unless_told_to_delete_it(fleet):
    """The incident planted again on fix-ctk and fix-incident, and a Deployment's GPU Pod with an
    emptyDir (a training job's scratch) on fix-ctk, the first to repair: its drain stops there
    before any eviction, named with its volume; the Pod untouched (same uid), the node back in
    service, fix-incident untouched, non-zero. With drain_delete_emptydir_data=true (its --dry
    first), the same node is repaired, the Pod evicted and said so."""
    nodes, path, root = fleet
    by_name = {n.name: n for n in nodes}
    for name in ("fix-ctk", "fix-incident"):
        incident_again(by_name[name])
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps(deployment("scratch-fix-ctk", "fix-ctk", "fleet-nvidia", ({"name": "ckpt", "emptyDir": {}},))),
    )
    try:
        eventually("the scratch Pod running", lambda: running("scratch-fix-ctk"), timeout=120)
        scratch = pod_of("scratch-fix-ctk")["metadata"]
        files = {n.name: simnodes.etc_containerd(n) for n in nodes}
        containerds = {n.name: simnodes.node_containerd(n) for n in nodes}
        run = fix(path)
        assert run.code != 0
        assert (
            f"the repair stopped: node fix-ctk, step drain: drain of fix-ctk: Pod(s) gpuop-fleet/{scratch['name']} "
            "(emptyDir ckpt) have local data an eviction deletes (drain_delete_emptydir_data=true evicts them, as "
            "kubectl drain --delete-emptydir-data does)"
        ) in run.log, run.log[-3000:]
        assert "node fix-incident untouched: the rollout stopped at node fix-ctk, step drain" in run.log
        assert pod_of("scratch-fix-ctk")["metadata"]["uid"] == scratch["uid"] and running("scratch-fix-ctk")
        assert not get("node/fix-ctk")["spec"].get("unschedulable")
        assert {n.name: simnodes.etc_containerd(n) for n in nodes} == files
        assert {n.name: simnodes.node_containerd(n) for n in nodes} == containerds
        dry = fix(path, "drain_delete_emptydir_data=true", dry=True)
        drained = next(line for line in dry.log.splitlines() if "fix-ctk:   cordon, then drain: evict" in line)
        assert drained.endswith(
            f"; their emptyDir data deleted with them: gpuop-fleet/{scratch['name']} (emptyDir ckpt) "
            "(drain_delete_emptydir_data=true)"
        ), drained
        report = os.path.join(root, "emptydir.json")
        again = fix(path, "drain_delete_emptydir_data=true", f"report={report}")
        assert again.code == 0, again.log[-4000:]
        assert "node fix-ctk: repaired and back in service" in again.log
        assert "node fix-incident: repaired and back in service" in again.log
        with open(report) as f:
            assert f"gpuop-fleet/{scratch['name']}" in json.load(f)["nodes"]["fix-ctk"]["evicted"]
        eventually("the scratch Deployment's new Pod running", lambda: running("scratch-fix-ctk"), timeout=120)
        assert pod_of("scratch-fix-ctk")["metadata"]["uid"] != scratch["uid"]
    finally:
        kubectl("delete", "deployment", "scratch-fix-ctk", "-n", NAMESPACE, "--ignore-not-found")


def test_a_node_an_earlier_run_left_failed_goes_back_only_once_proven(fleet):
    """fix-incident as a failed run leaves it (the incident planted again; gpuop's cordon and its
    failure mark on it) with a Pod no controller owns: this run's drain fails there, and the node
    stays cordoned, its mark updated: never put back unproven. With drain_unmanaged=true (its
    --dry first), the next run deletes that Pod, repairs the node and puts it back."""
    nodes, path, root = fleet
    incident = next(n for n in nodes if n.name == "fix-incident")
    incident_again(incident)
    kubectl("cordon", "fix-incident")
    kubectl(
        "annotate",
        "node",
        "fix-incident",
        f"{CORDONED_BY}=gpuop on ops-1 pid 5",
        f"{REPAIR_FAILED}=CRI: containerd on fix-incident to restart and load nvidia: not within 10s",
    )
    bare = {
        **BARE_POD,
        "metadata": {**BARE_POD["metadata"], "name": "bare-incident"},
        "spec": {**BARE_POD["spec"], "nodeName": "fix-incident"},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(bare))
    try:
        run = fix(path)
        assert run.code != 0
        refused = (
            "drain: drain of fix-incident: Pod(s) gpuop-fleet/bare-incident are owned by no controller, so nothing "
            "would bring them back (drain_unmanaged=true deletes them, as kubectl drain --force does)"
        )
        assert f"the repair stopped: node fix-incident, step {refused}" in run.log, run.log[-3000:]
        assert (
            "node fix-incident: stays cordoned: an earlier gpuop run left it failed (CRI: containerd on fix-incident "
            "to restart and load nvidia: not within 10s), and this run proved nothing"
        ) in run.log, run.log[-3000:]
        node = get("node/fix-incident")
        assert node["spec"].get("unschedulable") and node["metadata"]["annotations"][REPAIR_FAILED] == refused
        dry = fix(path, "drain_unmanaged=true", dry=True)
        drained = next(line for line in dry.log.splitlines() if "fix-incident:   cordon, then drain: evict" in line)
        assert drained.endswith("; delete gpuop-fleet/bare-incident (no controller owns them: drain_unmanaged=true)"), (
            drained
        )
        again = fix(path, "drain_unmanaged=true")
        assert again.code == 0, again.log[-4000:]
        assert "node fix-incident: repaired and back in service" in again.log
        assert get("pod/bare-incident", NAMESPACE) is None
        node = get("node/fix-incident")
        assert not node["spec"].get("unschedulable")
        assert not {CORDONED_BY, REPAIR_FAILED} & set(node["metadata"].get("annotations", {}))
    finally:
        kubectl("delete", "pod", "bare-incident", "-n", NAMESPACE, "--grace-period=0", "--force", "--ignore-not-found")
        kubectl("uncordon", "fix-incident")


# A probe Pod a killed run left (gpuop's labels), on a healthy node.
LEFT_PROBE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "gpuop-probe-left",
        "namespace": "default",
        "labels": {"app.kubernetes.io/managed-by": "gpuop", "gpuop.io/probe-node": "fix-healthy"},
    },
    "spec": {
        "nodeName": "fix-healthy",
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "probe", "image": READ_IMAGE, "command": ["/bin/sh", "-c", "sleep 3600"]}],
    },
}


def test_drain_false_restarts_under_the_running_pods(fleet):
    """drain=false (teams that restart under running Pods): --dry says no Pod is evicted, and the
    run repairs fix-incident with its GPU Pod running on through the restart (same uid). A probe
    Pod a killed run left is deleted first. No RuntimeClass maps to the handler (deleted for this
    run, so the audit after it finds the GPU Pods naming a class that is gone): the probe runs with
    one of gpuop's own, made for it and deleted after."""
    nodes, path, root = fleet
    incident_again(next(n for n in nodes if n.name == "fix-incident"))
    work = pod_of("work-fix-incident")["metadata"]["uid"]
    dry = fix(path, "drain=false", dry=True)
    assert "fix-incident:   cordon, no drain (drain=false): every Pod on it runs on through the restart" in dry.log, (
        dry.log[-3000:]
    )
    kubectl("apply", "-f", "-", stdin=json.dumps(LEFT_PROBE))
    report = os.path.join(root, "nodrain.json")
    # every RuntimeClass of handler nvidia deleted (fleet-nvidia, and any the lab left): the Pods run
    # on, and the probe has no class of theirs to use
    kept = ("name", "labels", "annotations")  # each put back as it was, less what the API server sets
    classes = [
        {
            **rc,
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {k: v for k, v in rc["metadata"].items() if k in kept},
        }
        for rc in get("runtimeclasses")["items"]
        if rc["handler"] == "nvidia"
    ]
    kubectl("delete", "runtimeclass", *[rc["metadata"]["name"] for rc in classes])
    try:
        run = fix(path, "drain=false", f"report={report}")
    finally:
        kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(rc) for rc in classes))
    # the audit after the rollout finds every node's GPU Pod naming a RuntimeClass that is gone
    assert run.code != 0 and "5 gap(s) left after the rollout" in run.log, run.log[-4000:]
    assert "repair: fix-incident: repaired" in run.log and "the repair stopped" not in run.log
    assert (
        "node fix-incident: no RuntimeClass maps to handler nvidia: the probe runs with RuntimeClass "
        "gpuop-probe-nvidia, made for it"
    ) in run.log, run.log[-3000:]
    assert "node fix-incident: a probe Pod of RuntimeClass gpuop-probe-nvidia ran there" in run.log
    assert get("runtimeclass/gpuop-probe-nvidia") is None  # made for the probe alone, gone after
    assert "repair: deleted the probe Pod(s) a killed run left: gpuop-probe-left" in run.log, run.log[-3000:]
    assert get("pod/gpuop-probe-left", "default") is None
    assert "node fix-incident: not drained (drain=false): its Pods run on through the restart" in run.log
    assert "node fix-incident: repaired and back in service" in run.log
    with open(report) as f:
        assert json.load(f)["nodes"]["fix-incident"]["evicted"] == []
    assert pod_of("work-fix-incident")["metadata"]["uid"] == work


def advertise_gpus(node: str, count):
    """The node's status advertises ``count`` GPUs (None: none), as a device plugin's would."""
    value = None if count is None else str(count)
    kubectl(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"capacity": {"nvidia.com/gpu": value}, "allocatable": {"nvidia.com/gpu": value}}}),
    )


def test_a_restart_that_never_returns_is_bounded_and_only_a_proof_puts_the_node_back(fleet):
    """The incident planted again on fix-incident, and a restart command that hangs: the run ends
    at restart_timeout_s, naming the command and its deadline, no traceback; the node stays
    cordoned and marked, its containerd the same. Its file was written before the restart, and
    the daemon still holds nvidia from before the incident was planted: the next run finds it
    healthy, proves it (a probe Pod given one of the GPUs the node advertises) and puts it back."""
    nodes, path, root = fleet
    incident = next(n for n in nodes if n.name == "fix-incident")
    incident_again(incident)
    daemon = simnodes.node_containerd(incident)
    try:
        run = fix(path, "containerd_restart=sleep 600", "restart_timeout_s=8")
    finally:  # the node's command outlives the run's SSH session
        subprocess.run(["pkill", "-f", "^sleep 600$"], check=False, timeout=10)
    assert run.code != 0
    words = "restart: the restart (sleep 600) did not end on fix-incident within restart_timeout_s=8s"
    assert f"the repair stopped: node fix-incident, step {words}" in run.log, run.log[-3000:]
    assert "Traceback" not in run.log and "gave no answer" not in run.log, run.log[-3000:]
    node = get("node/fix-incident")
    assert node["spec"].get("unschedulable") and node["metadata"]["annotations"][REPAIR_FAILED] == words
    assert simnodes.node_containerd(incident) == daemon
    advertise_gpus("fix-incident", 1)
    try:
        again = fix(path)
        assert again.code == 0, again.log[-4000:]
        assert "node fix-incident: a probe Pod of RuntimeClass fleet-nvidia ran there, given a GPU" in again.log, (
            again.log[-3000:]
        )
        assert "node fix-incident: healthy, and still cordoned by an earlier gpuop run: uncordoned" in again.log
    finally:
        advertise_gpus("fix-incident", None)
    node = get("node/fix-incident")
    assert not node["spec"].get("unschedulable") and REPAIR_FAILED not in node["metadata"].get("annotations", {})


def test_a_daemon_that_exits_at_once_after_the_restart_keeps_the_node_cordoned(fleet):
    """The incident planted again on fix-ctk and fix-incident, and a restart that leaves a broken
    config behind (as a bad binary or a hand edit would): fix-ctk's new containerd exits at once,
    again and again; the node stays cordoned and marked, fix-incident untouched. The config put
    right, the next run finds fix-ctk healthy, proves it and puts it back, and repairs fix-incident."""
    nodes, path, root = fleet
    by_name = {n.name: n for n in nodes}
    for name in ("fix-ctk", "fix-incident"):
        incident_again(by_name[name])
    config = f"/proc/{simnodes.ns_pid(by_name['fix-ctk'])}/root{CONFIG}"
    with open(config, "rb") as f:
        good = f.read()
    incident_files = simnodes.etc_containerd(by_name["fix-incident"])
    try:
        run = fix(
            path, f"containerd_restart=echo 'broken = [' >>{CONFIG} && pkill -x containerd", "restart_timeout_s=10"
        )
    finally:
        with open(config, "wb") as f:
            f.write(good)
    assert run.code != 0
    said = next(line for line in run.log.splitlines() if "the repair stopped: node fix-ctk, step CRI" in line)
    assert "containerd on fix-ctk to restart and load nvidia: not within 10s; last seen: " in said, said
    node = get("node/fix-ctk")
    assert node["spec"].get("unschedulable") and CORDONED_BY in node["metadata"]["annotations"]
    assert node["metadata"]["annotations"][REPAIR_FAILED].startswith(
        "CRI: containerd on fix-ctk to restart and load nvidia"
    )
    assert "node fix-incident untouched: the rollout stopped at node fix-ctk, step CRI" in run.log
    assert simnodes.etc_containerd(by_name["fix-incident"]) == incident_files

    def back():
        try:
            return simnodes.node_containerd(by_name["fix-ctk"])
        except AssertionError:  # none between two of its supervisor's starts
            return None

    eventually("fix-ctk's containerd back on its good config", back, timeout=60)
    again = fix(path)
    assert again.code == 0, again.log[-4000:]
    assert "node fix-ctk: healthy, and still cordoned by an earlier gpuop run: uncordoned" in again.log, again.log[
        -3000:
    ]
    assert "node fix-incident: repaired and back in service" in again.log
    assert not get("node/fix-ctk")["spec"].get("unschedulable")


def lease_seen() -> tuple:
    """The repair's Lease now: (holder, renewed at, duration), or None."""
    found = get("leases", "default", fieldSelector=f"metadata.name={LEASE}")["items"]
    spec = found[0]["spec"] if found else None
    return (spec["holderIdentity"], spec.get("renewTime"), spec["leaseDurationSeconds"]) if spec else None


def test_the_lock_is_kept_by_a_timer_for_the_whole_run_and_a_lock_taken_away_stops_it(fleet):
    """repair_lock_s=6 (renewed every 2 s by a timer) and a restart command that takes 9 s on
    fix-incident (the incident planted again): while the restart works, longer than the Lease
    lasts, the Lease stays this run's and its renewal moves; the node is repaired. Then the same
    again, and another run's holder written into the Lease while the restart works: the run stops
    before its next step, naming the lock; the node stays cordoned, the Lease the other run's.
    That Lease gone, the next run proves the node and puts it back."""
    nodes, path, root = fleet
    incident = next(n for n in nodes if n.name == "fix-incident")
    slow = ["--data", "repair_lock_s=6", "--data", "containerd_restart=sleep 9 && pkill -x containerd"]

    def started():
        incident_again(incident)
        run = Started([PYINFRA, "nodes.py", "fix.py", "-y", *slow], env={**os.environ, "GPUOP_NODES": path})
        eventually(
            "the slow restart command on fix-incident",
            lambda: subprocess.run(["pgrep", "-f", "^sleep 9$"], capture_output=True, timeout=10).returncode == 0,
            timeout=120,
        )
        return run

    run = started()
    seen = set()
    while run.proc.poll() is None:
        held = lease_seen()
        if held and subprocess.run(["pgrep", "-f", "^sleep 9$"], capture_output=True, timeout=10).returncode == 0:
            seen.add(held)
        time.sleep(0.5)
    log = run.finish(60)
    assert run.returncode == 0, log[-4000:]
    assert "node fix-incident: repaired and back in service" in log
    assert {(holder, duration) for holder, _, duration in seen} == {
        (f"gpuop on {socket.gethostname()} pid {run.pid}", 6)
    }
    assert len({renewed for _, renewed, _ in seen}) >= 3, seen  # renewed while the 9 s restart worked
    assert lease_seen() is None  # given back at the end
    # taken away while the restart works
    run = started()
    kubectl(
        "patch",
        "lease",
        LEASE,
        "-n",
        "default",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"holderIdentity": "gpuop on ops-2 pid 77", "leaseDurationSeconds": 600}}),
    )
    try:
        log = run.finish(120)
        assert run.returncode != 0
        assert (
            f"the repair stopped at the lock: the Lease default/{LEASE} was taken by gpuop on ops-2 pid 77 while "
            "this run held it"
        ) in log, log[-3000:]
        assert "node fix-incident left before its step CRI" in log, log[-3000:]
        node = get("node/fix-incident")
        assert node["spec"].get("unschedulable") and CORDONED_BY in node["metadata"]["annotations"]
        assert lease_seen()[0] == "gpuop on ops-2 pid 77"
    finally:
        kubectl("delete", "lease", LEASE, "-n", "default", "--ignore-not-found")
    again = fix(path)
    assert again.code == 0, again.log[-4000:]
    assert "node fix-incident: healthy, and still cordoned by an earlier gpuop run: uncordoned" in again.log
    assert not get("node/fix-incident")["spec"].get("unschedulable")


def test_failed_nodes_up_to_repair_max_failures_are_gone_past_and_repair_max_unavailable_nodes_go_at_once(fleet):
    """The incident planted again on fix-ctk and fix-incident (the seed's drop-in over the repaired
    one, their daemons still holding nvidia). A bare Pod stops fix-ctk's drain: with
    repair_max_failures=1 the rollout goes past it and repairs fix-incident, and the run fails
    naming fix-ctk. Then, the Pod gone, two nodes at once: fix-incident is cordoned before
    fix-ctk is back in service."""
    nodes, path, root = fleet
    by_name = {n.name: n for n in nodes}
    for name in ("fix-ctk", "fix-incident"):
        incident_again(by_name[name])
    kubectl("apply", "-f", "-", stdin=json.dumps(BARE_POD))
    try:
        run = fix(path, "repair_max_failures=1")
    finally:
        kubectl("delete", "pod", "bare", "-n", NAMESPACE, "--grace-period=0", "--force", "--ignore-not-found")
    assert run.code != 0
    assert (
        "the repair of node fix-ctk failed (the rollout goes on: repair_max_failures 1): node fix-ctk, step drain: "
        "drain of fix-ctk: Pod(s) gpuop-fleet/bare are owned by no controller"
    ) in run.log, run.log[-3000:]
    assert "node fix-incident: repaired and back in service" in run.log, run.log[-3000:]
    assert "1 node(s) failed: node fix-ctk, step drain" in run.log
    assert not get("node/fix-ctk")["spec"].get("unschedulable")
    incident_again(by_name["fix-incident"])
    both = fix(path, "repair_max_unavailable=2")
    assert both.code == 0, both.log[-4000:]
    assert both.log.index("node fix-incident: cordoned") < both.log.index("node fix-ctk: repaired and back in service")
    assert {"fix-ctk", "fix-incident"} == {
        name for name in by_name if f"node {name}: repaired and back in service" in both.log
    }


def test_a_run_killed_during_a_restart_is_finished_by_the_next(fleet):
    """The incident planted again on fix-incident; a run SIGKILLed while the node's restart command
    runs (after the file is written, before containerd restarts): the node is left cordoned by
    gpuop with the fixed file. The next run finds it so, and finishes: its files now load nvidia
    after a restart and its daemon holds it, so it is put back in service."""
    nodes, path, root = fleet
    incident = next(n for n in nodes if n.name == "fix-incident")
    incident_again(incident)
    daemon = simnodes.node_containerd(incident)
    kept = set(backups(incident))
    proc = subprocess.Popen(
        [PYINFRA, "nodes.py", "fix.py", "-y", "--data", "containerd_restart=sleep 60 && pkill -x containerd"],
        env={**os.environ, "GPUOP_NODES": path},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # the forecast's read follows the write: the restart runs once no read of the node is left
        eventually(
            "the killed run's restart command on fix-incident",
            lambda: subprocess.run(["pgrep", "-f", "^sleep 60$"], capture_output=True, timeout=10).returncode == 0,
            timeout=90,
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # the node's command outlives the run's SSH session: ended here, so that it never restarts
        subprocess.run(["pkill", "-f", "^sleep 60$"], check=False, timeout=10)
    node = get("node/fix-incident")
    assert node["spec"].get("unschedulable") and CORDONED_BY in node["metadata"]["annotations"]
    assert len(set(backups(incident)) - kept) == 1  # written: the one before kept
    assert simnodes.node_containerd(incident) == daemon  # never restarted
    again = fix(path)
    assert again.code == 0, again.log[-4000:]
    assert "node fix-incident: healthy, and still cordoned by an earlier gpuop run: uncordoned" in again.log, again.log[
        -3000:
    ]
    assert not get("node/fix-incident")["spec"].get("unschedulable")
    assert simnodes.node_containerd(incident) == daemon


def test_a_node_whose_containerd_does_not_come_back_stays_cordoned_and_stops_the_rollout(fleet):
    """Last: the incident planted again on the first and the last node (the seed's drop-in over
    the repaired one, their daemons still holding nvidia), and a restart that leaves containerd
    frozen: the first node stays cordoned, saying why on it, the last untouched. Unfrozen, the
    next run, through the cluster (reach: cluster, no SSH: each command in a short-lived Pod on
    the node), finds the first healthy and cordoned by gpuop, and puts it back; the last,
    cordoned by someone else meanwhile, is repaired and left cordoned."""
    nodes, path, root = fleet
    by_name = {n.name: n for n in nodes}
    for name in ("fix-ctk", "fix-incident"):
        incident_again(by_name[name])
    incident_files = simnodes.etc_containerd(by_name["fix-incident"])
    frozen = simnodes.node_containerd(by_name["fix-ctk"])
    run = fix(path, "containerd_restart=kill -STOP $(pidof containerd)", "restart_timeout_s=10")
    try:
        assert run.code != 0
        said = next(line for line in run.log.splitlines() if "the repair stopped: node fix-ctk, step CRI" in line)
        assert "containerd on fix-ctk to restart and load nvidia: not within 10s; last seen: pid " in said, said
        assert "(not restarted yet)" in said, said  # frozen: the same daemon, never answering
        node = get("node/fix-ctk")
        assert node["spec"].get("unschedulable") and CORDONED_BY in node["metadata"]["annotations"]
        assert node["metadata"]["annotations"][REPAIR_FAILED].startswith(
            "CRI: containerd on fix-ctk to restart and load nvidia"
        )
        assert "node fix-incident untouched: the rollout stopped at node fix-ctk, step CRI" in run.log
        assert simnodes.etc_containerd(by_name["fix-incident"]) == incident_files
    finally:
        os.kill(frozen, signal.SIGCONT)
    kubectl("cordon", "fix-incident")  # someone else's
    try:
        again = fix(path, "reach=cluster")
        assert again.code == 0, again.log[-4000:]
        assert re.search(r"\[@kubenode/fix-incident\] +node fix-incident: repaired; it stays cordoned", again.log), (
            again.log[-5000:]
        )
        assert "node fix-ctk: healthy, and still cordoned by an earlier gpuop run: uncordoned" in again.log
        assert "node fix-incident: cordoned already by someone else: it stays so after the repair" in again.log
        assert (
            "node fix-incident: repaired; it stays cordoned: someone else cordoned it, theirs to put back" in again.log
        )
        assert "node fix-incident: repaired and back in service" not in again.log
        assert not get("node/fix-ctk")["spec"].get("unschedulable")
        node = get("node/fix-incident")
        assert node["spec"].get("unschedulable") and CORDONED_BY not in node["metadata"].get("annotations", {})
    finally:
        kubectl("uncordon", "fix-incident")
