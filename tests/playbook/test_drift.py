"""Drift, bad input, interruption and concurrency: converge back, lose nothing (issue 5)."""

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from tests.helpers.incident import MANIFESTS, REPORTS, assert_incident_end_state, lab_files
from tests.helpers.kube import get, kill_component, kubectl, lab_up, reset_lab, restart_etcd, set_gpus
from tests.helpers.labcontainerd import DEBIAN, kill, restart
from tests.helpers.playbook import CLUSTER_WORDS, LAB_LOCK, RUN_DEADLINE_S, deploy, fresh_incident, start, tree
from tests.helpers.proc import Started

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

DS = "daemonset/nvidia-container-toolkit"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A converged lab, and what a fresh run wrote: every file under the root but backups."""
    root = fresh_incident(tmp_path_factory, "drift")
    return root, lab_files(root)


def edit(path, text):
    def drift(root):
        (root / path).write_text(text)

    return drift


def append(path):
    def drift(root):
        with open(root / path, "a") as f:
            f.write("# edited by hand\n")

    return drift


def remove(path):
    return lambda root: (root / path).unlink()


def k(*args):
    return lambda root: kubectl(*args)


def rollback(root):
    kubectl(
        "patch",
        DS,
        "-n",
        "gpu-operator",
        "--type=strategic",
        "-p",
        json.dumps(
            {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "toolkit",
                                    "image": "nvcr.io/nvidia/k8s/container-toolkit:v1.16.2",
                                    "resources": {"requests": {"memory": "128Mi"}},
                                }
                            ]
                        }
                    }
                }
            }
        ),
    )


def delete_old_toolkit_pod(root):
    pods = get("pods", "gpu-operator")["items"]
    running = [p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Running"]
    kubectl("delete", "pod", running[0], "-n", "gpu-operator")


def cm_replicas(root):
    cm = get("configmap/time-slicing-config", "gpu-operator")
    text = cm["data"]["any"].replace("replicas: 5", "replicas: 2")
    kubectl(
        "patch",
        "configmap/time-slicing-config",
        "-n",
        "gpu-operator",
        "--type=merge",
        "-p",
        json.dumps({"data": {"any": text}}),
    )


def runtime_class_recreated_with_handler_runc(root):
    kubectl(
        "replace",
        "--force",
        "-f",
        "-",
        stdin=json.dumps(
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "runc"}
        ),
    )


def pod_recreated_with_another_spec(root):
    # Unbound (its node selector matches nothing), no runtime class, no GPU: a spec no update
    # can turn back into the playbook's.
    image = get("pod/cuda-probe", "gpu-lab")["spec"]["containers"][0]["image"]
    kubectl(
        "replace",
        "--force",
        "--grace-period=0",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "cuda-probe", "namespace": "gpu-lab"},
                "spec": {"nodeSelector": {"gpuop-test": "nowhere"}, "containers": [{"name": "cuda", "image": image}]},
            }
        ),
    )


def configmap_made_immutable_with_other_data(root):
    cm = get("configmap/time-slicing-config", "gpu-operator")
    kubectl(
        "patch",
        "configmap/time-slicing-config",
        "-n",
        "gpu-operator",
        "--type=merge",
        "-p",
        json.dumps({"immutable": True, "data": {"any": cm["data"]["any"].replace("replicas: 5", "replicas: 2")}}),
    )


def daemonset_recreated_with_another_selector(root):
    ds = get(DS, "gpu-operator")
    labels = {"app": "toolkit-by-hand"}
    ds["metadata"] = {"name": ds["metadata"]["name"], "namespace": "gpu-operator"}
    ds["spec"]["selector"] = {"matchLabels": labels}
    ds["spec"]["template"]["metadata"]["labels"] = labels
    ds.pop("status")
    kubectl("replace", "--force", "-f", "-", stdin=json.dumps(ds))


def patch(resource, namespace, body, kind="merge"):
    """A ``kubectl patch`` as ``kubectl edit`` would send it, of a field the playbook sets."""
    ns = ("-n", namespace) if namespace else ()
    return k("patch", resource, *ns, f"--type={kind}", "-p", json.dumps(body))


# Drifts no update can undo: the rerun must recreate the object, and says so.
RECREATED = {
    "RuntimeClass recreated with handler runc under the running Pod": runtime_class_recreated_with_handler_runc,
    "Pod recreated with another spec": pod_recreated_with_another_spec,
    "ConfigMap made immutable with other data": configmap_made_immutable_with_other_data,
    "DaemonSet recreated with another selector": daemonset_recreated_with_another_selector,
}

# kubectl edit of fields the playbook sets (a Namespace's are only its name; a RuntimeClass's
# handler cannot be edited at all: both are covered by deletions and RECREATED).
EDITED = {
    "Pod image edited": patch(
        "pod/cuda-probe",
        "gpu-lab",
        {"spec": {"containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"}]}},
        "strategic",
    ),
    "ConfigMap data edited": patch("configmap/time-slicing-config", "gpu-operator", {"data": {"any": "version: v1\n"}}),
    "DaemonSet maxUnavailable edited": patch(
        DS, "gpu-operator", {"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 3}}}}
    ),
    "DaemonSet memory edited to fit": patch(
        DS,
        "gpu-operator",
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "toolkit", "resources": {"requests": {"memory": "256Mi"}}}]}
                }
            }
        },
        "strategic",
    ),
    "Node GPU advertisement edited": lambda root: set_gpus("lab-node-0", 8),
}


UNQUOTED = """version = 2
imports = ["conf.d/*.toml"]
[plugins.io.containerd.grpc.v1.cri.containerd]
default_runtime_name = "runc"
"""

DRIFTS = {
    "config.toml without its runtime table": edit("etc/containerd/config.toml", "version = 2\nimports = []\n"),
    "config.toml with the unquoted key": edit("etc/containerd/config.toml", UNQUOTED),
    "drop-in deleted": remove("etc/containerd/conf.d/99-nvidia.toml"),
    "check-runtime.sh edited": append("bin/check-runtime.sh"),
    "check-runtime.sh not executable": lambda root: (root / "bin/check-runtime.sh").chmod(0o644),
    **{f"{r} deleted": remove(f"out/{r}") for r in REPORTS},
    **{f"{r} edited": append(f"out/{r}") for r in REPORTS},
    **{f"{m} edited": append(f"k8s/{m}") for m in MANIFESTS},
    "RuntimeClass deleted": k("delete", "runtimeclass", "nvidia"),
    "Pod deleted": k("delete", "pod", "cuda-probe", "-n", "gpu-lab"),
    "namespace gpu-lab deleted": k("delete", "namespace", "gpu-lab"),
    "lab-node-0 advertises no GPU": lambda root: set_gpus("lab-node-0", None),
    "lab-node-1 back to 4": lambda root: set_gpus("lab-node-1", 4),
    "ConfigMap replicas changed": cm_replicas,
    "DaemonSet deleted": k("delete", DS, "-n", "gpu-operator"),
    "DaemonSet rolled back": rollback,
    "a toolkit Pod deleted": delete_old_toolkit_pod,
    "namespace gpu-operator deleted": k("delete", "namespace", "gpu-operator", "--wait=false"),
    "lab containerd killed": kill,
    "lab containerd restarted after the drop-in": lambda root: restart(root, DEBIAN),
    **RECREATED,
    **EDITED,
}


def all_at_once(root):
    # The cluster first (deleting namespaces last), then the files.
    DRIFTS["lab containerd restarted after the drop-in"](root)
    for name in (
        "DaemonSet rolled back",
        "ConfigMap replicas changed",
        "lab-node-1 back to 4",
        "lab-node-0 advertises no GPU",
        "RuntimeClass deleted",
        "namespace gpu-lab deleted",
        "namespace gpu-operator deleted",
    ):
        DRIFTS[name](root)
    for path in ("etc/containerd/conf.d/99-nvidia.toml", *(f"out/{r}" for r in REPORTS)):
        remove(path)(root)
    edit("etc/containerd/config.toml", UNQUOTED)(root)
    for rel in ("bin/check-runtime.sh", *(f"k8s/{m}" for m in MANIFESTS)):
        append(rel)(root)
    (root / "bin/check-runtime.sh").chmod(0o644)


DRIFTS["all of these at once"] = all_at_once


# Files a repair rewrites although the drift did not touch them: replaying the stalled rollout
# applies the initial toolkit manifest, then the upgrade, so toolkit-ds.yaml is written twice
# (and ends as it was). Every other file the drift left alone must keep its mtime. ("All of these
# at once" edits toolkit-ds.yaml itself.)
ROLLOUT_REPLAYED = {"k8s/toolkit-ds.yaml"}
REWRITTEN = {
    **{
        name: ROLLOUT_REPLAYED
        for name in (
            "rollout.txt deleted",
            "rollout.txt edited",
            "DaemonSet deleted",
            "DaemonSet rolled back",
            "a toolkit Pod deleted",
            "namespace gpu-operator deleted",
            "DaemonSet recreated with another selector",
            "DaemonSet maxUnavailable edited",
            "DaemonSet memory edited to fit",
        )
    },
}


def changed_files(before: dict, after: dict) -> set:
    """Lab files (not the playbook's own bookkeeping under .gpuop/) added, removed or rewritten
    (mode, mtime or bytes) between two ``tree`` snapshots."""
    keys = {
        k
        for k in before.keys() | after.keys()
        if before.get(k, (0, 0, 0))[2] is not None
        and after.get(k, (0, 0, 0))[2] is not None
        and not k.startswith(".gpuop")
        and ".gpuop-bak." not in k
    }
    return {k for k in keys if before.get(k) != after.get(k)}


@pytest.mark.parametrize("drift", list(DRIFTS), ids=list(DRIFTS))
def test_rerun_repairs_exactly_the_drift(lab, drift):
    root, fresh = lab
    converged = tree(root)
    DRIFTS[drift](root)
    drifted = tree(root)
    touched = changed_files(converged, drifted)
    run = deploy(root)
    assert run.code == 0, run.log
    assert_incident_end_state(root, fresh)
    # Exactly the drift: what it touched is back, and nothing else was written.
    assert changed_files(drifted, tree(root)) - touched == REWRITTEN.get(drift, set())
    if drift in RECREATED:
        assert "the API refuses to update" in run.log and "recreating its objects" in run.log
    again = deploy(root)
    assert again.code == 0 and again.changed == 0, again.changed_ops()


def test_replaced_files_are_kept_as_backups(lab):
    root, fresh = lab
    bad_config = "this is [not valid toml\n"
    (root / "etc/containerd/config.toml").write_text(bad_config)
    append("bin/check-runtime.sh")(root)
    edited_script = (root / "bin/check-runtime.sh").read_text()
    run = deploy(root)
    assert run.code == 0, run.log
    assert lab_files(root) == fresh
    for rel, previous in (("etc/containerd/config.toml", bad_config), ("bin/check-runtime.sh", edited_script)):
        backups = sorted(glob.glob(f"{root}/{rel}.gpuop-bak.*"))
        assert backups and open(backups[-1]).read() == previous, rel
        assert f"{root}/{rel} differs from what the playbook writes; keeping it as {backups[-1]}" in run.log


def test_replay_runs_the_whole_incident_again(lab):
    root, fresh = lab
    backups_before = sorted(glob.glob(f"{root}/**/*.gpuop-bak.*", recursive=True))
    run = deploy(root, "replay=true")
    assert run.code == 0, run.log
    replayed = set(run.changed_ops())
    for op in (
        "Replay: reset the lab to before step 1 | Remove the incident's files, objects and GPU advertisements",
        "Step 1: containerd main config | config.toml",
        "Step 5: RuntimeClass and a GPU Pod that cannot schedule | unscheduled.txt",
        "Step 8: a toolkit upgrade that stalls on memory | rollout.txt",
    ):
        assert op in replayed
    assert_incident_end_state(root, fresh)
    assert sorted(glob.glob(f"{root}/**/*.gpuop-bak.*", recursive=True)) == backups_before
    assert deploy(root).changed == 0


def snapshot(root):
    objects = {}
    for resource, ns in (
        ("runtimeclasses", None),
        ("pods", "gpu-lab"),
        ("configmaps", "gpu-operator"),
        ("daemonsets", "gpu-operator"),
        ("nodes", None),
        ("namespaces", None),
    ):
        items = (get(resource, ns) or {"items": []})["items"]
        objects[resource] = sorted(
            (
                i["metadata"]["name"],
                i["metadata"].get("uid"),
                json.dumps(i.get("spec"), sort_keys=True),
                json.dumps(i.get("data"), sort_keys=True),
                json.dumps((i.get("status") or {}).get("allocatable"), sort_keys=True),
            )
            for i in items
        )
    return objects, (tree(root) if root.exists() else None)


def test_bad_input_stops_before_any_change(lab):
    """A bad knob on a converged lab, end to end: the run stops before anything in the lab or
    the cluster changes. The table of bad knobs and their words is tests/unit/test_knobs.py's."""
    root, _ = lab
    before = snapshot(root)
    run = deploy(root, "toolkit_memory_upgrade=64GB!")
    assert run.code != 0
    assert (
        "@local: knob toolkit_memory_upgrade='64GB!': expected a positive Kubernetes quantity" in run.log
        and "nothing was changed" in run.log
    ), run.log
    assert snapshot(root) == before


@pytest.mark.parametrize(
    "data,message",
    [
        (
            ("lab_nodes=lab-node-0,lab-node-1,lab-node-9",),
            f"preflight: lab nodes lab-node-9 not in the cluster of {CLUSTER_WORDS}",
        ),
        (("kube_context=kwok-no-such-lab",), "preflight: the cluster of context kwok-no-such-lab is unreachable"),
    ],
)
def test_preflight_stops_before_any_change(lab, data, message):
    root, _ = lab
    before = snapshot(root)
    run = deploy(root, *data)
    assert run.code != 0
    assert f"[@local] {message}" in run.log and "nothing was changed" in run.log
    assert snapshot(root) == before


def interrupt(run: Started):
    """Ctrl-C, and a kill if the run does not stop at once (a closed terminal)."""
    run.proc.send_signal(signal.SIGINT)
    try:
        run.proc.wait(2)
    except subprocess.TimeoutExpired:
        run.proc.kill()
    run.finish(RUN_DEADLINE_S)


@pytest.mark.parametrize(
    "marker",
    [
        "Step 2: the toolkit's nvidia drop-in",
        "Step 6: advertise GPUs like a device plugin | lab-node-0 advertises 4 GPUs",
        "waiting for all Pods of DaemonSet gpu-operator/nvidia-container-toolkit Ready",
    ],
)
def test_a_run_killed_by_sigint_is_repaired_by_the_next(lab, marker):
    root, fresh = lab
    reset_lab()
    for path in (root / "out").glob("*"):
        path.unlink()
    # An initial toolkit no node can take: the killed run could never finish by itself, and
    # sits in the step 8 wait for its Pods when killed there.
    proc = start(root, "toolkit_memory_initial=40Gi")
    proc.until(marker, RUN_DEADLINE_S)
    interrupt(proc)
    assert not (root / "out/rollout.txt").exists()  # it was stopped half-way
    run = deploy(root)
    assert run.code == 0, run.log
    assert_incident_end_state(root, fresh)
    assert deploy(root).changed == 0


def test_apiserver_killed_while_step_8_waits(lab):
    """The API server dies while step 8 waits for its Pods: the run fails within its timeout,
    naming the step, what it waited for and the last state it saw; after `make lab-up`, one
    rerun converges."""
    root, fresh = lab
    # An initial toolkit no node can take keeps step 8 waiting for as long as the test needs.
    proc = start(root, "toolkit_memory_initial=40Gi", "wait_timeout_s=15")
    proc.until("waiting for all Pods of DaemonSet gpu-operator/nvidia-container-toolkit Ready", RUN_DEADLINE_S)
    killed_at = time.monotonic()
    kill_component("kube-apiserver")
    try:
        log = proc.finish(RUN_DEADLINE_S)
        failed_after = time.monotonic() - killed_at
    finally:
        lab_up()
    assert proc.returncode != 0
    assert failed_after < 15 + 10, failed_after
    failure = next(line.strip() for line in log.splitlines() if "timed out after 15s" in line)
    assert failure.startswith(
        "[@local] Step 8: a toolkit upgrade that stalls on memory | Every node "
        "runs a Ready initial toolkit Pod: timed out after 15s waiting for all "
        "Pods of DaemonSet gpu-operator/nvidia-container-toolkit Ready; last seen: "
        "the cluster does not answer ("
    ), failure
    assert "Traceback" not in log
    run = deploy(root)
    assert run.code == 0, run.log
    assert_incident_end_state(root, fresh)
    assert deploy(root).changed == 0
    print(failure)


def test_etcd_restarted_between_two_runs(lab):
    root, fresh = lab
    restart_etcd()
    run = deploy(root)
    assert run.code == 0, run.log
    assert run.changed == 0, run.changed_ops()  # etcd kept the lab: nothing to redo
    assert_incident_end_state(root, fresh)


def test_two_runs_at_once_never_interleave(lab):
    root, fresh = lab
    first = start(root, "replay=true")  # slow enough: namespaces take seconds to delete
    first.until("Replay: reset the lab to before step 1", RUN_DEADLINE_S)
    second = start(root)
    waited = second.until("waiting for the lab lock", RUN_DEADLINE_S)
    assert f"held by {os.uname().nodename} pid {first.pid} " in waited
    assert "Starting operation" not in waited  # nothing of the second run ran yet
    impatient = deploy(root, "wait_timeout_s=1")
    assert impatient.code != 0
    assert f"another gpuop run holds {LAB_LOCK}" in impatient.log
    first_log, second_log = first.finish(RUN_DEADLINE_S), second.finish(RUN_DEADLINE_S)
    assert first.returncode == 0, first_log
    assert second.returncode == 0, second_log
    # The second run's first operation started only after the first run's last operation ended
    # (its summary, printed at disconnect and changing nothing, may come after).
    assert second.first_seen("Starting operation") > first.last_seen("] Success", "] No changes"), second_log
    assert_incident_end_state(root, fresh)
