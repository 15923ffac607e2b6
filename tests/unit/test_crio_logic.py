"""CRI-O's own words, recorded from the lab's CRI-O 1.36.3 (tests/unit/data/README), read as the
node audit reads them, and judged by the one rule set."""

from gpuop.judgment import crio
from gpuop.judgment.node_rules import gpu_paths
from gpuop.judgment.rules import findings
from gpuop.judgment.view import api_view, cdi_part, loaded_part, restart_part
from runbook.reach.containerd import cri_answer
from tests.helpers.crioreads import (
    THERE,
    crio_view,
    data,
    merge_lines,
    node,
    pod,
    rc,
)


def test_crictl_info_of_cri_o_says_its_handlers_default_and_cdi_dirs():
    answer = cri_answer([data("crio-1.36.3-crictl-info.json"), "0"])
    assert answer["cri"] == "ok" and answer["runtimes"] == ["runc"] and answer["default_runtime"] == "runc"
    assert answer["cdi"] is True and answer["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]


def test_its_own_status_api_answers_what_it_holds_where_no_crictl_is():
    answer = crio.status_answer([*data("crio-1.36.3-status-config.toml").splitlines(), "0"])
    assert (answer["runtimes"], answer["default_runtime"], answer["cdi_spec_dirs"]) == (
        ["runc"],
        "runc",
        ["/etc/cdi", "/var/run/cdi"],
    )
    assert loaded_part(answer) == {
        "loaded": ["runc"],
        "loaded_from": "status",
        "cri_error": "",
        "default_runtime": "runc",
    }
    assert crio.status_answer(["Error: connection refused", "1"]) is None  # not answered: crictl's word stands


def test_the_merge_is_read_and_a_runtime_whose_binary_is_missing_is_dropped():
    said = crio.restart_answer(merge_lines(THERE))
    assert said["version"] == "1.36.3" and said["starts"] and said["cri_ok"]
    assert said["runtimes"] == ["nvidia", "runc"] and said["default_runtime"] == "runc"
    # crun is CRI-O's built-in runtime: in its merge, and dropped at start where it is not installed
    assert "runtime crun's binary (crun on its PATH) is missing, so CRI-O drops it" == said["reason"]
    gone = crio.restart_answer(merge_lines([THERE[0], "nvidia|/usr/bin/nvidia-container-runtime|no", THERE[2]]))
    assert gone["runtimes"] == ["runc"] and gone["starts"]
    assert "runtime nvidia's binary (/usr/bin/nvidia-container-runtime) is missing" in gone["reason"]


def test_a_merge_cut_short_is_no_forecast():
    assert crio.restart_answer(["Version: 1.36.3", "[crio.runtime", crio.PATHS]) is None


def test_a_missing_default_runtime_binary_stops_the_start():
    said = crio.restart_answer(merge_lines([THERE[0], THERE[1], "runc|/usr/sbin/runc|no"]))
    assert not said["starts"] and not said["cri_ok"]
    assert said["reason"].startswith(
        "the daemon will not start: runtime validation: the binary of its "
        "default_runtime runc (/usr/sbin/runc) is missing"
    )


def test_a_config_crio_refuses_is_a_start_that_fails_in_its_own_words():
    said = crio.restart_answer(
        ["Version: 1.36.3", crio.MERGE_FAILED, *data("crio-1.36.3-config-refused.txt").splitlines(), "", crio.PATHS]
    )
    assert not said["starts"] and said["runtimes"] == []
    assert said["reason"] == (
        'the daemon will not start: validating runtime config: default_runtime set to "kata", '
        "but no runtime entry table [crio.runtime.runtimes.kata] was found"
    )


def test_written_is_the_config_then_its_drop_ins_in_name_order():
    files = {
        "/etc/crio/crio.conf": {"text": '[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\n'},
        "/etc/crio/crio.conf.d/99-nvidia.toml": {"text": data("crio-1.36.3-config.toml")},
        "/etc/crio/crio.conf.d/10-crun.conf": {"text": '[crio.runtime]\ndefault_runtime = "crun"\n'},
        "/etc/crio/crio.conf.d/50-bad.conf": {"text": "[crio.runtime\n"},
    }
    view = crio.written_view("/etc/crio/crio.conf", "/etc/crio/crio.conf.d", files)
    assert view["dropins"] == [
        "/etc/crio/crio.conf.d/10-crun.conf",
        "/etc/crio/crio.conf.d/50-bad.conf",
        "/etc/crio/crio.conf.d/99-nvidia.toml",
    ]
    assert view["runtimes"] == ["runc", "crun", "nvidia"]
    assert view["default_runtime"] == "runc"  # 99-nvidia.toml, the last, sets it again (crio config's output)
    assert len(view["errors"]) == 1 and "50-bad.conf is not valid TOML" in view["errors"][0]


def test_the_toolkits_oci_hook_is_a_gpu_path_with_no_handler():
    hook = {
        "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json": {"text": data("ctk-1.20.2-oci-hook.json")},
        "/usr/share/containers/oci/hooks.d/other.json": {"text": '{"hook": {"path": "/usr/bin/true"}}'},
        "/usr/share/containers/oci/hooks.d/broken.json": {"text": "{"},
    }
    assert crio.hooked_gpus(hook) == ["/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"]
    view = crio_view(gpu_hooks=crio.hooked_gpus(hook))
    assert gpu_paths(view) == ["oci-hook"]
    gpu_pod = pod("train", "gpu-a", gpus=1)
    assert findings(view, [node("gpu-a"), gpu_pod], "gpu-a") == []  # the hook hands it its GPU
    assert [g["kind"] for g in findings(crio_view(), [node("gpu-a"), gpu_pod], "gpu-a")] == [
        "cdi-spec-missing",
        "gpu-advertised-not-loaded",
    ]


def test_the_incident_in_cri_os_form():
    """nvidia-ctk's drop-in written after CRI-O started: written, not loaded; a restart loads it."""
    answer = cri_answer([data("crio-1.36.3-crictl-info.json"), "0"])
    restart = crio.restart_answer(merge_lines(THERE))
    view = crio_view(
        written=["runc", "nvidia"],
        **loaded_part(answer),
        cdi=cdi_part(answer, "1.36.3", []),
        **restart_part(restart, "1.36.3", runtime=crio.NAME),
    )
    gaps = findings(view, [node("gpu-a"), rc("nvidia"), pod("job", "gpu-a", runtime_class="nvidia")], "gpu-a")
    kinds = {g["kind"]: g for g in gaps}
    assert set(kinds) == {"handler-not-loaded", "sandbox-fails", "gpu-advertised-not-loaded"}
    assert kinds["sandbox-fails"]["detail"].endswith(
        "cri-o 1.36.3 says: failed to find runtime handler nvidia from runtime list map[runc:<ptr>]"
    )
    assert "live through CRI of cri-o 1.36.3" in kinds["handler-not-loaded"]["detail"]


def test_a_written_handler_a_restart_drops_is_named():
    restart = crio.restart_answer(merge_lines([THERE[0], "nvidia|/usr/bin/nvidia-container-runtime|no", THERE[2]]))
    view = crio_view(
        written=["runc", "nvidia"], loaded=["runc", "nvidia"], **restart_part(restart, "1.36.3", runtime=crio.NAME)
    )
    gaps = findings(view, [], "")
    assert [(g["kind"], g["subject"]) for g in gaps] == [("restart-drops-runtime", "nvidia")]
    assert gaps[0]["detail"].endswith(
        "drops it: runtime nvidia's binary (/usr/bin/nvidia-container-runtime) is missing, so CRI-O drops it"
    )


def test_a_cri_o_node_not_read_is_named_and_judged_from_what_its_kubelet_reports():
    reporting = {
        **node("gpu-a"),
        "status": {
            **node("gpu-a")["status"],
            "runtimeHandlers": [{"name": ""}, {"name": "runc"}],
            "nodeInfo": {"containerRuntimeVersion": "cri-o://1.36.3"},
        },
    }
    view = api_view(reporting)
    assert (view["runtime"], view["version"], view["loaded"], view["loaded_from"]) == (
        "cri-o",
        "1.36.3",
        ["runc"],
        "api",
    )
    gaps = findings(view, [reporting, rc("nvidia"), pod("job", "gpu-a", runtime_class="nvidia")], "gpu-a")
    assert [g["kind"] for g in gaps] == ["sandbox-fails", "gpu-advertised-not-loaded"]
    assert (
        gaps[1]["detail"]
        == "node gpu-a offers 8 GPU(s) but its cri-o neither loads nvidia nor resolves CDI devices of GPUs"
    )
