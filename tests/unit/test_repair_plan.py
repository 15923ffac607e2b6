"""The fleet repair's plan of a node, from its read and the cluster's objects, without a cluster."""

import tomllib

import tomli_w

from gpuop.containerd import nvidia_dropin, runtime_names, seed_config
from gpuop.repair_plan import drainable, handler_dropin, plan_lines, plan_node
from gpuop.view import node_view
from tests.unit.test_node_logic import CONFIG, MAIN, RC, daemon, node, pod, read

NVIDIA = "/etc/containerd/conf.d/99-nvidia.toml"
SEED_DROPIN = tomli_w.dumps(nvidia_dropin())


def planned(d, *objects):
    return plan_node("gpu-a", read(d), node_view(read(d)), [RC, node(), *objects], "nvidia")


def owned(p, kind):
    p["metadata"]["ownerReferences"] = [{"kind": kind, "name": "x", "controller": True}]
    return p


def test_the_incident_on_1_6_rewrites_the_drop_in_keeping_the_cri_section_then_restarts():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    d = daemon(loaded=("runc",), after=("nvidia",), cri_ok=False, files=files)
    p = planned(d, owned(pod("train", runtime_class="nvidia"), "ReplicaSet"), owned(pod("toolkit", runtime_class=None), "DaemonSet"))
    assert (p["action"], p["restart"], p["file"]["path"]) == ("repair", True, NVIDIA)
    written = tomllib.loads(p["file"]["after"])
    assert sorted(runtime_names(written)) == ["nvidia", "runc"]  # 1.x replaces the section: runc carried
    assert p["file"]["before"] == SEED_DROPIN and p["file"]["diff"][0].startswith(f"--- {NVIDIA} (now)")
    assert (p["evict"], p["stays"], p["unmanaged"]) == (["ns/train"], ["ns/toolkit"], [])
    lines = plan_lines(p)
    assert lines[0].startswith("gpu-a: repair: a restart takes CRI down (default_runtime_name \"runc\" has no runtime)")
    assert lines[1] == "gpu-a:   cordon, then drain: evict ns/train"
    assert lines[-1] == "gpu-a:   restart containerd 1.6.20, prove it (CRI, kubelet Ready, a probe Pod), uncordon"


def test_a_drop_in_written_and_not_loaded_whose_restart_loads_it_is_a_restart_alone():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    p = planned(daemon(loaded=("runc",), after=("nvidia", "runc"), files=files, version="1.7.35"))
    assert (p["action"], p["restart"], p["file"]) == ("repair", True, None)
    assert "restart loads it with CRI up; the running daemon does not hold it" in p["why"]


def test_a_healthy_node_and_a_node_meant_for_no_handler_are_left_alone():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    healthy = planned(daemon(loaded=("nvidia", "runc"), after=("nvidia", "runc"), files=files, version="2.4.2"))
    assert (healthy["action"], plan_lines(healthy)) == ("none", ["gpu-a: nothing to do: nvidia is loaded now and after a restart"])
    cdi = planned(daemon(loaded=("runc",), after=("runc",), version="2.4.2"))  # no file writes nvidia, no Pod asks it
    assert cdi["action"] == "none" and "nothing to repair" in cdi["why"]


def test_a_pod_asking_the_handler_on_a_node_whose_files_lack_it_gets_the_drop_in_in_the_root_s_version():
    main = tomli_w.dumps({"version": 3, **{k: v for k, v in seed_config("/etc/containerd/conf.d/*.toml").items() if k != "version"}})
    d = daemon(loaded=("runc",), after=("runc",), version="2.3.3", files={CONFIG: {"mode": "644", "text": main}})
    p = planned(d, owned(pod("train"), "ReplicaSet"))
    assert (p["action"], p["file"]["path"], p["file"]["before"]) == ("repair", NVIDIA, None)
    assert tomllib.loads(p["file"]["after"])["version"] == 3  # never above the root's: 2.3.3 refuses that


def test_what_is_not_repaired_here_is_said():
    p = planned(daemon(loaded=("runc",), after=("runc",), files={CONFIG: {"mode": "644", "text": "version = 2\n"}}),
                pod("bare"))
    assert p["action"] == "blocked" and "imports no drop-in directory" in p["why"]
    assert plan_lines(p) == [f"gpu-a: NOT repaired: {p['why']}"]
    unread = plan_node("gpu-a", read(), node_view(read()), [RC, node(), pod("bare")], "nvidia")
    assert unread["action"] == "blocked" and "nothing is planned blind" in unread["why"]


def test_a_drain_evicts_what_a_controller_brings_back_and_names_what_nothing_does():
    assert drainable(owned(pod("a"), "ReplicaSet")) == "evict"
    assert drainable(owned(pod("b"), "DaemonSet")) == "stays"
    assert drainable(pod("c")) == "unmanaged"
    mirror = pod("d")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    assert drainable(mirror) == "stays"
    done = pod("e")
    done["status"]["phase"] = "Succeeded"
    assert drainable(done) == "stays"


def test_the_handler_drop_in_per_version():
    root2 = seed_config("/x/*.toml")
    assert handler_dropin("2.4.2", root2, "nvidia") == nvidia_dropin()
    assert sorted(runtime_names(handler_dropin("1.6.20", root2, "nvidia"))) == ["nvidia", "runc"]
    v3 = handler_dropin("2.2.9", {**root2, "version": 3}, "gpu")
    assert v3["version"] == 3 and list(v3["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]) == ["gpu"]


def test_a_restart_command_is_one_line():
    import pytest

    from gpuop.knobs import NODE_PARSERS, KnobError
    assert NODE_PARSERS["containerd_restart"]("containerd_restart", "systemctl restart k3s") == "systemctl restart k3s"
    for bad in ("", "  ", "a\nb", None):
        with pytest.raises(KnobError, match="containerd_restart=.*expected one shell command line"):
            NODE_PARSERS["containerd_restart"]("containerd_restart", bad)
