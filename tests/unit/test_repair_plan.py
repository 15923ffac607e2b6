"""The fleet repair's plan of a node, from its read and the cluster's objects, without a cluster."""

import os
import tomllib

import tomli_w

from gpuop.judgment import crio
from gpuop.judgment.configs import nvidia_dropin, repaired_dropin, seed_config
from gpuop.judgment.containerd import runtime_names
from gpuop.judgment.view import node_view
from gpuop.knobs import DrainPolicy
from gpuop.repair.plan import dropin_target, plan_lines, with_import
from gpuop.repair.pods import drainable
from runbook.reach.containerd import cri_answer
from runbook.reach.node import ToolkitDropin
from tests.helpers.crioreads import THERE, data, merge_lines
from tests.helpers.nodereads import CONFIG, MAIN, RC, daemon, node, pod, read
from tests.helpers.plans import plan_of

NVIDIA = "/etc/containerd/conf.d/99-nvidia.toml"
SEED_DROPIN = tomli_w.dumps(nvidia_dropin())


def planned(d, *objects):
    return plan_of("gpu-a", read(d), node_view(read(d)), [RC, node(), *objects], "nvidia")


def owned(p, kind):
    p["metadata"]["ownerReferences"] = [{"kind": kind, "name": "x", "controller": True}]
    return p


def test_the_incident_on_1_6_rewrites_the_drop_in_keeping_the_cri_section_then_restarts():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    d = daemon(loaded=("runc",), after=("nvidia",), cri_ok=False, files=files)
    p = planned(
        d,
        owned(pod("train", runtime_class="nvidia"), "ReplicaSet"),
        owned(pod("toolkit", runtime_class=None), "DaemonSet"),
    )
    assert (p["action"], p["restart"], [f["path"] for f in p["files"]]) == ("repair", True, [NVIDIA])
    file = p["files"][0]
    written = tomllib.loads(file["after"])
    assert sorted(runtime_names(written)) == ["nvidia", "runc"]  # 1.x replaces the section: runc carried
    assert file["before"] == SEED_DROPIN and file["diff"][0].startswith(f"--- {NVIDIA} (now)") and file["by"] == "gpuop"
    assert (p["evict"], p["stays"], p["unmanaged"]) == (["ns/train"], ["ns/toolkit"], [])
    lines = plan_lines(p)
    assert lines[0].startswith('gpu-a: repair: a restart takes CRI down (default_runtime_name "runc" has no runtime)')
    assert lines[1] == "gpu-a:   cordon, then drain: evict ns/train"
    assert lines[-1] == "gpu-a:   restart containerd 1.6.20, prove it (CRI, kubelet Ready, a probe Pod), uncordon"


def test_a_drop_in_written_and_not_loaded_whose_restart_loads_it_is_a_restart_alone():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    p = planned(daemon(loaded=("runc",), after=("nvidia", "runc"), files=files, version="1.7.35"))
    assert (p["action"], p["restart"], p["files"]) == ("repair", True, [])
    assert "restart loads it with CRI up; the running daemon does not hold it" in p["why"]


def test_a_healthy_node_and_a_node_meant_for_no_handler_are_left_alone():
    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    healthy = planned(daemon(loaded=("nvidia", "runc"), after=("nvidia", "runc"), files=files, version="2.4.2"))
    assert (healthy["action"], plan_lines(healthy)) == (
        "none",
        ["gpu-a: nothing to do: nvidia is loaded now and after a restart"],
    )
    cdi = planned(daemon(loaded=("runc",), after=("runc",), version="2.4.2"))  # no file writes nvidia, no Pod asks it
    assert cdi["action"] == "none" and "nothing to repair" in cdi["why"]


def test_a_pod_asking_the_handler_on_a_node_whose_files_lack_it_gets_the_drop_in_in_the_root_s_version():
    main = tomli_w.dumps(
        {"version": 3, **{k: v for k, v in seed_config("/etc/containerd/conf.d/*.toml").items() if k != "version"}}
    )
    d = daemon(loaded=("runc",), after=("runc",), version="2.3.3", files={CONFIG: {"mode": "644", "text": main}})
    p = planned(d, owned(pod("train"), "ReplicaSet"))
    assert (p["action"], [(f["path"], f["before"]) for f in p["files"]]) == ("repair", [(NVIDIA, None)])
    assert tomllib.loads(p["files"][0]["after"])["version"] == 3  # never above the root's: 2.3.3 refuses that


def test_a_config_with_no_imports_gets_one_line_importing_the_drop_in_s_directory():
    root = "# the node's own words stay\nversion = 2\n\n[plugins]\n  # and these\n"
    p = planned(daemon(loaded=("runc",), after=("runc",), files={CONFIG: {"mode": "600", "text": root}}), pod("bare"))
    assert p["action"] == "repair" and [(f["path"], f["mode"]) for f in p["files"]] == [
        (CONFIG, "600"),
        (NVIDIA, "644"),
    ]
    assert p["files"][0]["after"] == (
        "# the node's own words stay\nversion = 2\n"
        'imports = ["/etc/containerd/conf.d/*.toml"]\n\n[plugins]\n  # and these\n'
    )
    assert [line for line in p["files"][0]["diff"] if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        '+imports = ["/etc/containerd/conf.d/*.toml"]'
    ]
    assert "nvidia" in runtime_names(tomllib.loads(p["files"][1]["after"]))
    lines = plan_lines(p)
    assert (
        f"gpu-a:   write {CONFIG}, by gpuop (an import of the drop-in's directory) (the file before kept under "
        "/var/lib/gpuop/backup, where no runtime reads):" in lines
    )
    assert f"gpu-a:   write {NVIDIA}, by gpuop:" in lines


def test_an_import_is_added_to_the_imports_a_config_has_and_a_named_file_not_there_is_the_target():
    assert (
        with_import('version = 2\nimports = [\n  "/a/x.toml",\n]\n[plugins]\n', "/b/*.toml")
        == 'version = 2\nimports = ["/a/x.toml", "/b/*.toml"]\n[plugins]\n'
    )
    assert with_import("[plugins]\n", "/b/*.toml") == 'imports = ["/b/*.toml"]\n[plugins]\n'
    assert dropin_target(CONFIG, {"version": 2, "imports": ["/etc/containerd/gpu.toml"]}, [], []) == (
        "/etc/containerd/gpu.toml",
        True,
    )
    assert dropin_target(
        CONFIG, {"version": 2, "imports": ["/etc/containerd/gpu.toml"]}, ["/etc/containerd/gpu.toml"], []
    ) == ("/etc/containerd/conf.d/99-nvidia.toml", False)  # someone's file: not overwritten


def test_the_toolkit_s_own_drop_in_is_written_where_the_root_s_version_takes_it():
    main = tomli_w.dumps({"version": 3, "imports": ["/etc/containerd/conf.d/*.toml"]})
    d = daemon(loaded=("runc",), after=("runc",), version="2.3.3", files={CONFIG: {"mode": "644", "text": main}})
    runtime = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}
    for version, by in (
        (2, "nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk)"),
        (4, "gpuop, not nvidia-ctk 1.20.2 (its drop-in is version 4, the root's 3)"),
    ):
        text = tomli_w.dumps(
            {
                "version": version,
                "plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {"nvidia": runtime}}}},
            }
        )
        toolkit = {"path": "/usr/bin/nvidia-ctk", "version": "1.20.2", "dropin": text, "said": ""}
        p = plan_of("gpu-a", read(d), node_view(read(d)), [RC, node(), pod("bare")], "nvidia", toolkit)
        assert [(f["path"], f["by"]) for f in p["files"]] == [(NVIDIA, by)]
        assert (p["files"][0]["after"] == text) == (version == 2)


def test_what_is_not_repaired_here_is_said():
    p = planned(
        daemon(loaded=("runc",), after=("runc",), files={CONFIG: {"mode": "644", "text": "version = 1\n"}}), pod("bare")
    )
    assert p["action"] == "blocked" and "version-1 config, which has no imports" in p["why"]
    assert plan_lines(p) == [f"gpu-a: NOT repaired: {p['why']}"]
    unread = plan_of("gpu-a", read(), node_view(read()), [RC, node(), pod("bare")], "nvidia")
    assert unread["action"] == "blocked" and "nothing is planned blind" in unread["why"]


def test_a_drain_evicts_what_a_controller_brings_back_and_names_what_nothing_does():
    assert drainable(owned(pod("a"), "ReplicaSet")) == "evict"
    assert drainable(owned(pod("b"), "DaemonSet")) == "stays"
    assert drainable(pod("c")) == "unmanaged"
    mirror = pod("d")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    assert drainable(mirror) == "stays"
    read = pod("gpuop-read-x")
    read["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "gpuop", "gpuop.io/read-node": "gpu-a"}
    assert drainable(read) == "stays"  # the cluster reach's own Pod: it ends by itself
    done = pod("e")
    done["status"]["phase"] = "Succeeded"
    assert drainable(done) == "stays"


def test_the_handler_drop_in_per_version():
    root2 = seed_config("/x/*.toml")
    assert repaired_dropin("2.4.2", root2, "nvidia") == nvidia_dropin()
    assert sorted(runtime_names(repaired_dropin("1.6.20", root2, "nvidia"))) == ["nvidia", "runc"]
    v3 = repaired_dropin("2.2.9", {**root2, "version": 3}, "gpu")
    assert v3["version"] == 3 and list(v3["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]) == [
        "gpu"
    ]


def test_a_restart_command_is_one_line():
    import pytest

    from gpuop.knobs import NODE_PARSERS, KnobError

    assert NODE_PARSERS["containerd_restart"]("containerd_restart", "systemctl restart k3s") == "systemctl restart k3s"
    for bad in ("", "  ", "a\nb", None):
        with pytest.raises(KnobError, match="containerd_restart=.*expected one shell command line"):
            NODE_PARSERS["containerd_restart"]("containerd_restart", bad)


def test_on_k3s_and_rke2_the_template_gets_the_handler_never_the_file_they_write_anew():
    """The toolkit wrote nvidia into RKE2's config.toml (loaded now); RKE2's template extends its
    built-in one with a registry only, so its next start drops nvidia: the template is extended,
    and read back by the audit's own view, its next start holds nvidia."""
    rke2 = "/var/lib/rancher/rke2/agent/etc/containerd"
    config, tmpl = f"{rke2}/config.toml", f"{rke2}/config-v3.toml.tmpl"
    header = "# File generated by rke2. DO NOT EDIT. Use config.toml.tmpl instead.\n"
    own = (
        '{{ template "base" . }}\n[plugins."io.containerd.cri.v1.images".registry]\n'
        '  config_path = "/etc/containerd/certs.d"\n'
    )
    files = {
        config: {"mode": "600", "text": header + MAIN + SEED_DROPIN.split("\n", 1)[1]},
        tmpl: {"mode": "600", "text": own},
    }
    d = {**daemon(loaded=("nvidia", "runc"), version="2.4.2", files=files), "config": config}
    p = plan_of("gpu-a", read(d), node_view(read(d)), [RC, node(), pod("train")], "nvidia")
    assert p["action"] == "repair" and [f["path"] for f in p["files"]] == [tmpl], p
    change = p["files"][0]
    assert change["after"].startswith(own) and change["by"].startswith("gpuop (the template rke2 renders")
    assert "rke2 writes" in p["why"] and f"{tmpl} gets it" in p["why"]
    files[tmpl] = {"mode": "600", "text": change["after"]}
    after = node_view(read(d))
    assert (after["cri_after_restart"], sorted(after["after_restart"])) == ("ok", ["nvidia", "runc"])
    # no template yet: a new one, extending the built-in one
    del files[tmpl]
    new = plan_of("gpu-a", read(d), node_view(read(d)), [RC, node(), pod("train")], "nvidia")["files"][0]
    assert (new["path"], new["before"]) == (tmpl, None) and new["after"].startswith(
        '{{ template "base" . }}\n\n[plugins.'
    )


def test_the_toolkit_s_dry_run_is_read_for_its_drop_in_alone():
    with open(os.path.join(os.path.dirname(__file__), "data", "ctk-1.20.2-dry-run.txt")) as f:
        toolkit = ToolkitDropin().process(f.read().splitlines())
    assert (toolkit["path"], toolkit["version"], toolkit["said"]) == ("/usr/bin/nvidia-ctk", "1.20.2", "")
    doc = tomllib.loads(toolkit["dropin"])
    assert doc["version"] == 2 and runtime_names(doc) == ["nvidia"] and "imports" not in doc  # not the root's part
    assert (
        ToolkitDropin().process(
            [
                "/usr/bin/nvidia-ctk",
                "NVIDIA Container Toolkit CLI version 1.20.2",
                'level=error msg="unable to load config"',
            ]
        )["said"]
        == 'level=error msg="unable to load config"'
    )


# CRI-O: its files, what the daemon holds (its recorded `crictl info`: runc) and its own merge
CRIO_CONF, CRIO_DROPIN = "/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml"
CTK_CRIO_TABLE = (
    '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\nruntime_type = "oci"\n'
)


def crio_daemon(files, binaries, loaded_from_crictl=True):
    return {
        "pid": 7,
        "exe": "/usr/bin/crio",
        "config": CRIO_CONF,
        "config_dir": "/etc/crio/crio.conf.d",
        "address": "/var/run/crio/crio.sock",
        "serves": True,
        "files": {p: {"mode": "644", "text": t} for p, t in files.items()},
        "loaded": cri_answer([data("crio-1.36.3-crictl-info.json"), "0"]) if loaded_from_crictl else None,
        "restart": crio.restart_answer(merge_lines(binaries)),
        "hooks": {},
    }


def crio_planned(d, *objects, toolkit=None):
    r = {"hostname": "gpu-a", "containerds": [], "crios": [d], "kubelet": None}
    return plan_of("gpu-a", r, node_view(r), [RC, node(), *objects], "nvidia", toolkit)


def test_on_cri_o_a_drop_in_written_after_it_started_is_a_restart_alone():
    p = crio_planned(crio_daemon({CRIO_CONF: "", CRIO_DROPIN: CTK_CRIO_TABLE}, THERE))
    assert (p["action"], p["restart"], p["files"], p["runtime"]) == ("repair", True, [], "cri-o")
    assert p["why"] == (
        "nvidia is written and a restart of cri-o 1.36.3 loads it (its own merge of the files); "
        "the running daemon does not hold it"
    )
    assert plan_lines(p)[-1] == "gpu-a:   restart cri-o 1.36.3, prove it (CRI, kubelet Ready, a probe Pod), uncordon"


def test_on_cri_o_with_nothing_written_the_toolkit_s_drop_in_goes_into_its_folder_then_the_restart():
    with open(os.path.join(os.path.dirname(__file__), "data", "ctk-1.20.2-crio-dry-run.txt")) as f:
        toolkit = ToolkitDropin().process(f.read().splitlines())
    assert (toolkit["version"], toolkit["said"]) == ("1.20.2", "")  # its log left out, its drop-in alone
    d = crio_daemon({CRIO_CONF: ""}, [THERE[0], "nvidia|/usr/bin/nvidia-container-runtime|yes", THERE[2]])
    d["restart"]["runtimes"] = ["runc"]  # the merge of files that give no nvidia
    asking = owned(pod("train", runtime_class="nvidia"), "ReplicaSet")
    p = crio_planned(d, asking, toolkit=toolkit)
    assert (p["action"], p["restart"], [(f["path"], f["by"], f["before"]) for f in p["files"]]) == (
        "repair",
        True,
        [(CRIO_DROPIN, "nvidia-ctk 1.20.2 (/usr/bin/nvidia-ctk)", None)],
    )
    assert tomllib.loads(p["files"][0]["after"])["crio"]["runtime"]["runtimes"]["nvidia"] == {
        "runtime_path": "/usr/bin/nvidia-container-runtime",
        "runtime_type": "oci",
    }
    assert p["evict"] == ["ns/train"] and "no file gives nvidia" in p["why"]
    # no nvidia-ctk on the node: the same table, by gpuop
    own = crio_planned(d, asking)
    assert own["files"][0]["by"].startswith("gpuop") and tomllib.loads(own["files"][0]["after"]) == tomllib.loads(
        p["files"][0]["after"]
    )


def test_on_cri_o_a_handler_its_merge_drops_or_a_node_not_read_whole_is_not_repaired():
    dropped = crio_planned(
        crio_daemon(
            {CRIO_CONF: "", CRIO_DROPIN: CTK_CRIO_TABLE},
            [THERE[0], "nvidia|/usr/bin/nvidia-container-runtime|no", THERE[2]],
        )
    )
    assert dropped["action"] == "blocked" and dropped["why"].startswith(
        "a restart of cri-o 1.36.3 would not load nvidia: runtime crun's binary"
    )
    assert "nvidia-container-runtime) is missing" in dropped["why"] and not dropped["files"]
    unread = crio_planned(crio_daemon({CRIO_CONF: "", CRIO_DROPIN: CTK_CRIO_TABLE}, THERE, loaded_from_crictl=False))
    assert unread["action"] == "blocked" and "nothing is planned blind" in unread["why"]


def test_a_pod_with_emptydir_data_stops_the_drain_unless_its_knob_says_delete_it():
    """As kubectl drain decides it: an emptyDir of any medium is data an eviction deletes; a
    DaemonSet's Pod stays, so its scratch never counts."""
    from gpuop.repair.pods import local_storage

    files = {CONFIG: {"mode": "644", "text": MAIN}, NVIDIA: {"mode": "644", "text": SEED_DROPIN}}
    train = owned(pod("train", runtime_class="nvidia"), "ReplicaSet")
    train["spec"]["volumes"] = [
        {"name": "ckpt", "emptyDir": {"medium": "Memory"}},
        {"name": "cfg", "configMap": {"name": "c"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    agent = owned(pod("agent", runtime_class=None), "DaemonSet")
    agent["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    assert local_storage(train) == ["ckpt", "scratch"] and local_storage(owned(pod("plain"), "ReplicaSet")) == []
    p = planned(daemon(loaded=("runc",), after=("nvidia", "runc"), files=files, version="1.7.35"), train, agent)
    assert p["local_storage"] == ["ns/train (emptyDir ckpt, scratch)"]
    assert plan_lines(p)[1] == (
        "gpu-a:   cordon, then drain: evict ns/train; Pods whose emptyDir data an eviction "
        "deletes stop the drain: ns/train (emptyDir ckpt, scratch)"
    )
    assert plan_lines(p, DrainPolicy(delete_emptydir_data=True))[1] == (
        "gpu-a:   cordon, then drain: evict ns/train; their emptyDir data deleted with them: ns/train (emptyDir ckpt, "
        "scratch) (drain_delete_emptydir_data=true)"
    )
    assert plan_lines(p, DrainPolicy(drain=False))[1] == (
        "gpu-a:   cordon, no drain (drain=false): every Pod on it runs on through the restart"
    )


def test_a_probe_asks_a_gpu_only_where_one_is_free_and_an_api_server_away_is_asked_again():
    import urllib3
    from kubernetes.client.exceptions import ApiException

    from gpuop.repair.drain import api_away
    from gpuop.repair.pods import free_gpus

    node = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"nvidia.com/gpu": "2"}}}
    holding = owned(pod("train", runtime_class="nvidia"), "ReplicaSet")
    holding["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    ended = {**holding, "status": {"phase": "Succeeded"}}
    elsewhere = {**holding, "spec": {**holding["spec"], "nodeName": "gpu-b"}}
    assert free_gpus(node, []) == 2 and free_gpus(node, [ended, elsewhere]) == 2
    assert free_gpus(node, [holding]) == 0
    assert free_gpus({"metadata": {"name": "gpu-a"}, "status": {"allocatable": {}}}, []) == 0
    # refused, timed out or unavailable: asked again; a refusal of the request itself: not
    assert api_away(urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.NewConnectionError(None, "refused")))
    assert api_away(TimeoutError()) and api_away(ApiException(status=503))
    assert not api_away(ApiException(status=403)) and not api_away(ValueError("bad"))


def test_a_ready_status_is_proof_only_when_the_kubelet_beat_after_the_restart():
    from datetime import datetime

    from gpuop.repair.drain import heard_since

    t = [datetime(2026, 12, 4, 22, 0, s) for s in (0, 5, 10)]
    assert heard_since((t[0], t[1]), (t[0], t[1])) is False  # nothing sent since: the old status
    assert heard_since((t[0], t[1]), (t[0], t[2])) is True  # its Lease renewed since
    assert heard_since((t[0], t[1]), (t[1], t[1])) is True  # its status sent since
    assert heard_since((t[0], None), (t[0], None)) is False  # no Lease, and no status since
    assert heard_since((t[0], None), (t[0], t[1])) is True  # a Lease made since
    assert heard_since((None, None), (None, None)) is False


def test_a_probe_claims_only_a_device_no_claim_holds_and_is_then_placed_by_the_scheduler():
    from gpuop.repair.pods import free_devices
    from gpuop.repair.probe import probe_manifest

    published = {
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-a-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-a",
            "pool": {"name": "gpu-a"},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        },
    }
    elsewhere = {
        "kind": "ResourceSlice",
        "metadata": {"name": "gpu-b-gpus"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-b",
            "pool": {"name": "gpu-b"},
            "devices": [{"name": "gpu-0"}],
        },
    }
    held = {
        "kind": "ResourceClaim",
        "metadata": {"name": "train", "namespace": "ml"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "gpu-a", "device": "gpu-1"}]}}
        },
    }
    assert free_devices("gpu-a", [published, elsewhere], "gpu.nvidia.com") == 2
    assert free_devices("gpu-a", [published, elsewhere, held], "gpu.nvidia.com") == 1
    assert free_devices("gpu-a", [published], "other.example.com") == 0
    claimed = probe_manifest("gpu-a", "nvidia", "busybox", "default", 120, claim="gpuop-probe-x")["spec"]
    assert "nodeName" not in claimed  # the scheduler alone allocates a claim
    assert claimed["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ] == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]
    assert claimed["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpuop-probe-x"}]
    assert claimed["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    plugin = probe_manifest("gpu-a", "nvidia", "busybox", "default", 120, gpus=1)["spec"]
    assert plugin["nodeName"] == "gpu-a" and plugin["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "resources" not in probe_manifest("gpu-a", "nvidia", "busybox", "default", 120)["spec"]["containers"][0]
