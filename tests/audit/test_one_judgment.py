"""One judgment for every target: the same state planted on a lab host (the lab's real containerd
under a lab root, audit.py on inventory.py) and on a simulated node (its own namespaces and
containerd at the default paths, audit.py on nodes.py) gives the same findings of the runtime.

The lab's nodes are kwok's, so its runtime serves no Node: what both audits judge alike is the
runtime itself (what a restart does, its files, CRI, handlers written but not loaded). A path
in a subject is compared from the config's own folder (the lab's is under its root).
"""

import json
import os
import posixpath
import tomllib

import pytest
import tomli_w

from gpuop.judgment.configs import nvidia_dropin, seed_config
from tests.helpers import fleetobjects, layouts, nodesfiles, simnodes
from tests.helpers.kube import lab_up, reset_lab
from tests.helpers.labcontainerd import binary, nvidia_ctk
from tests.helpers.layouts import DROPIN, write_file
from tests.helpers.playbook import deploy
from tests.helpers.proc import run
from tests.helpers.simnodes import Node

pytestmark = [pytest.mark.lab, pytest.mark.every_containerd]  # see pytest.ini

SEED_DROPIN = tomli_w.dumps(nvidia_dropin())
V4_DROPIN = tomli_w.dumps({"version": 4, **nvidia_dropin()})  # what nvidia-ctk 1.19+ writes beside containerd 2.3
RUNTIME_KINDS = (
    "restart-refuses-start",
    "restart-takes-cri-down",
    "second-containerd",
    "config-unreadable",
    "dropin-not-imported",
    "cri-down",
    "handler-not-loaded",
    "lost-at-regeneration",
)

# state -> (containerd version, the findings of its runtime, the binary's own words in the restart's finding)
STATES = {
    "incident-1-6": (
        "1.6.20",
        [("restart-takes-cri-down", "containerd"), ("handler-not-loaded", "nvidia")],
        'default_runtime_name "runc" has no runtime',
    ),
    "v4-dropin-2-2": (
        "2.2.9",
        [("restart-refuses-start", "containerd"), ("handler-not-loaded", "nvidia")],
        "expected containerd config version equal to or less than `3`, got `4`",
    ),
    "v4-dropin-2-3": (
        "2.3.3",
        [("restart-refuses-start", "containerd"), ("handler-not-loaded", "nvidia")],
        "drop-in config version 4 higher than root config version 2",
    ),
    "ctk-unrestarted-1-7": ("1.7.35", [("handler-not-loaded", "nvidia")], None),
    "missed-import-2-2": ("2.2.9", [("dropin-not-imported", "conf.d/99-nvidia.toml")], None),
}
MISSED_IMPORTS = "config.d/*.toml"  # a folder the drop-in is not in


def node_for(state: str) -> Node:
    """The state on a simulated node: each file written once its containerd runs (never loaded)."""
    version = STATES[state][0]
    if state.startswith("incident"):
        return Node(state, version, after=[write_file(DROPIN, SEED_DROPIN)])
    if state.startswith("v4-dropin"):
        return Node(state, version, after=[write_file(DROPIN, V4_DROPIN)])
    if state.startswith("ctk-unrestarted"):
        return Node(state, version, after=[layouts.nvidia_ctk_configure()])
    return Node(state, version, imports=f"/etc/containerd/{MISSED_IMPORTS}", files={DROPIN: SEED_DROPIN})


def plant_on_lab(root, state: str):
    """The same state on a lab host that deploy.py left at the incident (its drop-in written after
    its containerd started): the drop-in replaced, or the imports pointed away from it."""
    config, dropin = root / "etc/containerd/config.toml", root / "etc/containerd/conf.d/99-nvidia.toml"
    if state.startswith("v4-dropin"):
        dropin.write_text(V4_DROPIN)
    elif state.startswith("ctk-unrestarted"):
        dropin.unlink()
        run(
            [
                nvidia_ctk(),
                "runtime",
                "configure",
                "--runtime=containerd",
                f"--config={config}",
                f"--drop-in-config={dropin}",
            ],
            timeout_s=60,
            check=True,
        )
        assert dropin.exists()
    elif state.startswith("missed-import"):
        config.write_text(tomli_w.dumps(seed_config(str(root / "etc/containerd" / MISSED_IMPORTS))))


def runtime_findings(gaps: list, config: str) -> list:
    """The runtime's own findings, each subject that is a path read from the config's folder."""
    here = posixpath.dirname(config)
    return sorted(
        (g["kind"], posixpath.relpath(g["subject"], here) if g["subject"].startswith("/") else g["subject"])
        for g in gaps
        if g["kind"] in RUNTIME_KINDS
    )


@pytest.fixture(scope="module")
def node_reports(tmp_path_factory):
    """Every state on its own simulated node, all audited in one run of nodes.py."""
    root = str(tmp_path_factory.mktemp("judgment"))
    nodes = [node_for(state) for state in STATES]
    with simnodes.running(nodes, root) as key:
        fleetobjects.create_cluster_objects(nodes)
        path = nodesfiles.nodes_file(nodes, key, os.path.join(root, "nodes.yaml"), {})
        report = os.path.join(root, "fleet.json")
        run = deploy(None, f"report={report}", env={"GPUOP_NODES": path}, inventory="nodes.py", script="audit.py")
        assert os.path.exists(report), run.log[-4000:]
        with open(report) as f:
            return json.load(f)["nodes"]


@pytest.fixture(scope="module")
def lab_root(tmp_path_factory):
    lab_up()  # kwok's nodes again, whatever a test before it in its lane left
    reset_lab()
    return tmp_path_factory.mktemp("judgment-lab") / "gpuop"


@pytest.mark.parametrize("state", list(STATES))
def test_a_lab_host_and_a_node_in_one_state_get_one_judgment(state, lab_root, node_reports):
    version, expected, words = STATES[state]
    data = (f"containerd_binary={binary(version)}",)
    assert deploy(lab_root, *data).code == 0  # the incident on this version, whatever came before
    plant_on_lab(lab_root, state)
    run = deploy(lab_root, *data, script="audit.py")
    assert run.code != 0, run.log  # every state here is a gap
    lab = json.loads((lab_root / "out/audit.json").read_text())
    node = node_reports[state]
    assert (lab["version"], node["version"]) == (version, version)
    assert runtime_findings(lab["gaps"], str(lab_root / "etc/containerd/config.toml")) == sorted(expected)
    assert runtime_findings(node["gaps"], layouts.CONFIG) == sorted(expected)
    assert lab["cri_after_restart"] == node["cri_after_restart"]
    if words:
        for gaps in (lab["gaps"], node["gaps"]):
            restart = next(g for g in gaps if g["kind"].startswith("restart-"))
            assert words in restart["detail"], restart


@pytest.mark.parametrize("version", ["2.2.9", "2.3.3"])
def test_fix_replaces_a_drop_in_the_binary_refuses_and_never_restarts_into_the_refusal(version, lab_root):
    """A version-4 drop-in that containerd 2.2 and 2.3 refuse at their next start: fix.py writes
    one the running binary takes, and restarts only once the binary's own merge says it starts."""
    data = (f"containerd_binary={binary(version)}", f"nvidia_ctk_binary={nvidia_ctk()}")
    assert deploy(lab_root, *data).code == 0
    plant_on_lab(lab_root, "v4-dropin")
    log = lab_root / "var/log/containerd.log"
    before = log.read_text()
    fixed = deploy(lab_root, *data, script="fix.py")
    assert fixed.code == 0, fixed.log[-3000:]
    dropin = tomllib.loads((lab_root / "etc/containerd/conf.d/99-nvidia.toml").read_text())
    assert dropin.get("version", 1) <= 2  # no higher than the root config's
    audit = json.loads((lab_root / "out/audit.json").read_text())
    assert (audit["gaps"], audit["cri_after_restart"], sorted(audit["loaded"])) == ([], "ok", ["nvidia", "runc"])
    said = log.read_text()[len(before) :]
    assert "higher than root config version" not in said and "equal to or less than" not in said, said[-2000:]
