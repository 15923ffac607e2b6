"""The GPU proof's stand-in lane (issue 50): bench/gpu/proof.sh on the kit the lab builds
(lab/build.sh gpu-kit), every stage's mechanics on real daemons and the toolkit's real runtime,
with only the GPU stood in (a CDI spec of the lab's own and its stand-in nvidia-smi); the judge's
table agrees in every stage, a planted disagreement fails naming its stage, and nothing of the
run is left on the host."""

import glob
import os
import subprocess

import pytest

from gpuop.judgment.gpuproof import STAGES  # every stage proof.sh runs and the judge reads
from tests.helpers.proc import run
from tests.helpers.simnodes import host_files, tree

pytestmark = [pytest.mark.daemons, pytest.mark.every_containerd]  # daemons of its own, no cluster: see pytest.ini

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
PROOF, JUDGE = os.path.join(REPO, "bench/gpu/proof.sh"), os.path.join(REPO, "bench/gpu/judge.py")
WORK = "/tmp/gpuop-gpu-proof"


# Where a GPU node's runtimes and the toolkit write by default, beside simnodes' own list.
TOOLKIT_PATHS = ("/etc/cdi", "/var/run/cdi", "/etc/nvidia-container-runtime", "/etc/containers")


def host_now() -> dict:
    """The host's files a runtime or the toolkit writes; not the kubelets' Pods' cgroups (k8s.io),
    which the lane beside this one makes and removes meanwhile: the proof's own are checked apart."""
    return {
        **host_files(cgroups=False),
        **{p: tree(p) if os.path.isdir(p) else os.path.exists(p) for p in TOOLKIT_PATHS},
    }


@pytest.fixture(scope="module")
def proof(tmp_path_factory):
    kit = run([os.path.join(REPO, "lab/build.sh"), "gpu-kit"], timeout_s=3600, check=True).stdout.strip()
    out = str(tmp_path_factory.mktemp("gpu-proof"))
    before = host_now()
    ran = run([PROOF, kit, out, "--stand-in"], timeout_s=600)
    return ran, out, before


def observed(out: str, stage: str) -> list:
    with open(os.path.join(out, stage, "observed")) as f:
        return f.read().splitlines()


def test_every_stage_agrees_with_the_gpu_it_stood_in_for(proof):
    ran, out, _ = proof
    assert ran.returncode == 0, ran.stdout + ran.stderr[-3000:]
    assert "mode stand-in" in ran.stdout
    rows = {line.split()[0]: line for line in ran.stdout.splitlines() if line.split()[:1] and line.split()[0] in STAGES}
    assert set(rows) == set(STAGES), ran.stdout
    assert all(row.rstrip().endswith(" yes") for row in rows.values()), ran.stdout


def test_each_stage_did_what_its_state_does(proof):
    """The mechanics, stage by stage, from what the containers themselves said."""
    _, out, _ = proof
    [incident] = observed(out, "1-incident")
    assert incident.startswith("pod gpu-pod refused ") and 'no runtime for \\"nvidia\\" is configured' in incident
    assert observed(out, "2-restarted") == [
        "restart back",
        "pod gpu-pod gpu GPU 0: gpuop stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)",
    ]
    cdi, plain = observed(out, "3-cdi")
    assert cdi.startswith("pod cdi-pod gpu GPU 0: ") and plain == "pod plain-pod none /bin/sh: nvidia-smi: not found"
    assert observed(out, "4-cdi-off") == ["pod cdi-pod none /bin/sh: nvidia-smi: not found"]
    kept, restart = observed(out, "5-version-4")
    assert kept.startswith("pod gpu-pod gpu GPU 0: ")  # asked again after the version-4 drop-in
    assert restart.startswith("restart not-back ") and "version 4" in restart
    [crio] = observed(out, "6-crio")
    assert crio.startswith("pod gpu-pod refused ") and "failed to find runtime handler nvidia from runtime list" in crio
    restart, again = observed(out, "6-crio-restarted")
    assert restart == "restart back" and again.startswith("pod gpu-pod gpu GPU 0: ")
    assert observed(out, "7-probe") == ["pod gpuop-probe gpu exit 0, devices /dev/nvidia0"]
    # no driver on the stand-in's machine: nvidia-smi says none, and so does the node read
    assert observed(out, "0-driver") == ["driver none no nvidia-smi"]
    for stage in STAGES:  # the node read, as the fleet audit sends it, answered in every stage
        with open(os.path.join(out, stage, "read.txt")) as f:
            read = f.read()
        assert "--- gpuop driver" in read, stage
        if stage != "0-driver":  # no runtime runs there
            runtime = "crio" if "crio" in stage else "containerd"
            assert f"--- gpuop {runtime} " in read and "--- gpuop cri" in read, stage


def test_a_planted_disagreement_fails_naming_its_stage(proof):
    """Stage 1's objects and what its GPU did, judged from stage 2's node read (the handler
    loaded): the judge says the Pod gets its GPU, the GPU refused it."""
    _, out, _ = proof
    judged = run([os.path.join(REPO, ".venv/bin/python"), JUDGE, out, "--swap", "1-incident=2-restarted"], timeout_s=60)
    assert judged.returncode == 1
    assert "disagree in stage(s): 1-incident" in judged.stderr
    row = next(line for line in judged.stdout.splitlines() if line.startswith("1-incident"))
    assert row.rstrip().endswith(" NO") and "gpu-pod: refused" in row and "gpu-pod: gpu" in row


def test_nothing_of_the_run_is_left_on_the_host(proof):
    """No file outside /tmp (CRI-O writes /etc/crio/policies and its image library a cache in
    /var/lib/containers at their defaults: both kept in the scene's namespace), no process, no
    cgroup, and its folder under /tmp gone."""
    _, _, before = proof
    after = host_now()
    assert after == before, [k for k in after if after[k] != before.get(k)]
    assert not os.path.exists(WORK)
    left = subprocess.run(["pgrep", "-f", WORK], capture_output=True, text=True).stdout.split()
    assert left == [], left
    # the containers' cgroup parent, on cgroup v2 and under each v1 controller
    assert glob.glob("/sys/fs/cgroup/gpuop-gpu-proof*") + glob.glob("/sys/fs/cgroup/*/gpuop-gpu-proof*") == []
