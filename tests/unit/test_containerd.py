"""Merge analysis of containerd configs, on documents parsed exactly as the playbook writes them."""

import tomllib

import pytest
import tomli_w

from gpuop.judgment import configs, containerd
from gpuop.judgment.tomlpath import find_tables, key_path, quote_key
from runbook.reach.containerd import ContainerdRestart
from tests.helpers.matrix import outcome
from tests.helpers.observed import DROPINS, OBSERVED


def roundtrip(doc):
    return tomllib.loads(tomli_w.dumps(doc))


MAIN = roundtrip(configs.seed_config("/root/gpuop/etc/containerd/conf.d/*.toml"))
DROPIN = roundtrip(configs.nvidia_dropin())


def test_written_main_config_has_the_quoted_plugin_hierarchy():
    text = tomli_w.dumps(configs.seed_config("/r/conf.d/*.toml"))
    assert '[plugins."io.containerd.grpc.v1.cri".containerd]' in text
    cri = MAIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert MAIN["version"] == 2
    assert MAIN["imports"][0].endswith("conf.d/*.toml")
    assert cri["default_runtime_name"] == "runc"
    assert cri["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}


def test_unquoted_key_builds_another_hierarchy():
    doc = tomllib.loads("[plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc]\nx = 1\n")
    assert "io.containerd.grpc.v1.cri" not in doc["plugins"]
    assert containerd.runtime_names(doc) == ["runc"]
    assert containerd.analyze_merge(MAIN, [doc]).conflict_table is None


def test_dropin_declares_nvidia_with_the_same_cgroup_driver():
    nvidia = DROPIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}


def test_incident_merge_lines():
    lines = containerd.merge_lines(containerd.analyze_merge(MAIN, [DROPIN]), ["runc"])
    assert lines == [
        "MAIN_RUNTIMES=runc",
        "DROPIN_RUNTIMES=nvidia",
        "CONFLICT=yes",
        'CONFLICT_TABLE=plugins."io.containerd.grpc.v1.cri".containerd.runtimes',
        "LOADED_RUNTIMES=runc",
    ]


def test_no_conflict_when_dropins_touch_other_plugins_only():
    other = {"plugins": {"io.containerd.snapshotter.v1.overlayfs": {"root_path": "/x"}}}
    analysis = containerd.analyze_merge(MAIN, [other])
    assert analysis.conflict_table is None
    assert containerd.merge_lines(analysis, ["runc"])[2:4] == ["CONFLICT=no", "CONFLICT_TABLE="]


def test_runtime_names_keep_definition_order_across_dropins():
    a = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"z": {}, "a": {}}}}}}
    b = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"m": {}, "z": {}}}}}}
    assert containerd.analyze_merge(MAIN, [a, b]).dropin_runtimes == ["z", "a", "m"]


def test_containerd2_runtime_path_is_read_too():
    dump = {"plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {"runc": {}, "nvidia": {}}}}}}
    assert containerd.runtime_names(dump) == ["runc", "nvidia"]


def test_relative_imports_resolve_against_the_main_config():
    assert containerd.import_globs({"imports": ["conf.d/*.toml", "/abs/x.toml"]}, "/etc/containerd/config.toml") == [
        "/etc/containerd/conf.d/*.toml",
        "/abs/x.toml",
    ]


def test_key_quoting():
    assert quote_key("runtimes") == "runtimes"
    assert quote_key("io.containerd.grpc.v1.cri") == '"io.containerd.grpc.v1.cri"'
    assert quote_key('a"b') == '"a\\"b"'
    path = key_path(("plugins", "io.containerd.grpc.v1.cri", "containerd"))
    assert tomllib.loads(f"[{path}]\nk = 1\n")["plugins"]["io.containerd.grpc.v1.cri"]["containerd"] == {"k": 1}


DATA = "tests/unit/data"

# What each version's daemon did when restarted on each drop-in (tests/helpers/matrix.py on
# real daemons, 2026-12-03; tests/containerd/test_versions.py proves it again live at every
# `make test`): one row a version, one column a drop-in of DROPINS; a toolkit's cell is (the
# `version` the toolkit wrote in its drop-in, the outcome).
CELLS = [
    (v, d, seen[1] if isinstance(seen, tuple) else seen) for v, row in OBSERVED.items() for d, seen in zip(DROPINS, row)
]


def forecast_from(version, dropin) -> dict:
    """The forecast the fact makes of a real binary's recorded output (see tests/unit/data/README)."""
    with open(f"{DATA}/start-{version}-{dropin}.txt") as f:
        return ContainerdRestart().process(f.read().splitlines())


@pytest.mark.parametrize("version,dropin,seen", CELLS, ids=[f"{v}-{d}" for v, d, _ in CELLS])
def test_the_forecast_of_each_version_is_what_its_restart_did(version, dropin, seen):
    forecast = forecast_from(version, dropin)
    assert forecast["version"] == version
    assert outcome(forecast) == seen, forecast["reason"]


def test_a_failing_forecast_names_why_and_its_version_s_rule():
    incident = forecast_from("1.6.20", "seed")
    assert (incident["runtimes"], incident["default_runtime"]) == (["nvidia"], "runc")
    assert incident["reason"] == (
        'default_runtime_name "runc" has no runtime in containerd.runtimes '
        "(configured: nvidia); containerd 1.6: the runtimes an imported file "
        "names replace the main config's whole; a version above 2 is not checked (1.6.32 and 1.7.17 "
        "stop the daemon on it)"
    )
    assert forecast_from("1.7.35", "version-3")["reason"] == (
        "the daemon will not start: containerd: failed to load TOML from "
        "/root/gpuop/etc/containerd/conf.d/99-nvidia.toml: unsupported config version `3`; containerd 1.7: "
        "the runtimes an imported file names replace the main config's whole and a version above 2 stops the daemon"
    )
    assert forecast_from("2.3.3", "version-3")["reason"] == (
        "the daemon will not start: containerd: drop-in config version 3 higher than root config version 2; "
        "containerd 2.3: plugin sections merge deeply, and a drop-in whose version is above the root "
        "config's stops the daemon"
    )
    unconfigured = forecast_from("2.2.9", "default-unconfigured")
    assert unconfigured["reason"].startswith(
        'default_runtime_name "crun" has no runtime in containerd.runtimes '
        "(configured: runc); containerd 2.2: plugin sections merge deeply"
    )
    assert forecast_from("2.4.2", "seed")["reason"] == ""


def test_2_0_5_is_forecast_from_config_migrate_whose_runtimes_its_dump_misses():
    """containerd issue 11600: 2.0.0-2.0.5's dump drops a version-2 file's CRI runtimes."""
    assert containerd.start_subcommand("2.0.5") == "migrate"
    assert containerd.start_subcommand("2.0.6") == containerd.start_subcommand("2.1.9") == "dump"
    forecast = forecast_from("2.0.5", "seed")
    assert sorted(forecast["runtimes"]) == ["nvidia", "runc"] and "config migrate" not in forecast["reason"]
    assert "forecast from config migrate" in containerd.start_rule("2.0.5")


def test_1_x_reads_only_its_own_cri_plugin():
    """1.6.20 with a version-3 drop-in: the drop-in's plugins.'io.containerd.cri.v1.runtime' is
    a plugin 1.6 does not have; its CRI holds runc alone."""
    forecast = forecast_from("1.6.20", "version-3")
    assert forecast["runtimes"] == ["runc"] and forecast["cri_ok"]
    assert containerd.cri_plugin("1.7.35") == "io.containerd.grpc.v1.cri"
    assert containerd.cri_plugin("2.0.5") == "io.containerd.cri.v1.runtime"


def test_restart_forecast_without_a_default_runtime_fails():
    doc = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": {}}}}}}
    forecast = containerd.restart_forecast("1.6.20", doc)
    assert not forecast.cri_ok and forecast.reason.startswith("the CRI plugin has no default_runtime_name; ")


def test_unreadable_config_is_a_failed_start():
    forecast = containerd.unreadable_config("2.4.2", "toml: line 3: expected '='")
    assert (forecast.runtimes, forecast.cri_ok, forecast.starts) == ([], False, False)
    assert forecast.reason.startswith("the daemon will not start: toml: line 3: expected '='; containerd 2.4")


def test_binary_version():
    assert (
        containerd.binary_version("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3")
        == "1.6.20"
    )
    assert containerd.binary_version("containerd github.com/containerd/containerd/v2 v2.4.2 ") == "2.4.2"
    assert containerd.binary_version("") == "unknown"


def test_cri_runtimes_reads_the_handlers_crictl_reports():
    info = {
        "config": {
            "containerd": {
                "runtimes": {"runc": {"runtimeType": "io.containerd.runc.v2"}, "nvidia": {}},
                "defaultRuntimeName": "runc",
            }
        }
    }
    assert containerd.cri_runtimes(info) == (["runc", "nvidia"], "runc")
    assert containerd.cri_runtimes({}) == ([], "")


def test_restart_lines():
    fails = containerd.Forecast(["nvidia"], "runc", False, "why; rule")
    assert containerd.restart_lines("1.6.20", ["runc"], "cri", fails) == [
        "CONTAINERD_VERSION=1.6.20",
        "LOADED_RUNTIMES=runc",
        "LOADED_FROM=cri",
        "RESTART_RUNTIMES=nvidia",
        "RESTART_CRI=fails",
        "RESTART_REASON=why; rule",
    ]
    ok = containerd.Forecast(["nvidia", "runc"], "runc", True, "")
    assert containerd.restart_lines("2.4.2", ["runc"], "cri", ok)[3:] == [
        "RESTART_RUNTIMES=nvidia,runc",
        "RESTART_CRI=ok",
    ]
    assert containerd.restart_lines("none", ["runc"], "recorded", None) == [
        "CONTAINERD_VERSION=none",
        "LOADED_RUNTIMES=runc",
        "LOADED_FROM=recorded",
        "RESTART_RUNTIMES=",
        "RESTART_CRI=unknown",
        "RESTART_REASON=no lab containerd on this host to ask",
    ]


def test_dropin_keeping_cri_carries_the_main_config_section():
    doc = roundtrip(configs.dropin_keeping_cri(MAIN, DROPIN))
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "runc"
    assert list(cri["runtimes"]) == ["runc", "nvidia"]
    assert "imports" not in doc and "version" not in doc
    assert MAIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"].keys() == {"runc"}


def test_repaired_dropin_follows_the_version_s_merge():
    assert configs.repaired_dropin("2.4.2", MAIN) == configs.nvidia_dropin()
    on_1x = configs.repaired_dropin("1.6.20", MAIN)
    # SPEC's two runtimes, and the main config's default, in the one CRI section 1.x keeps whole.
    assert on_1x == {
        "plugins": {
            "io.containerd.grpc.v1.cri": {
                "containerd": {
                    "default_runtime_name": "runc",
                    "runtimes": {
                        "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
                        "nvidia": {
                            "runtime_type": "io.containerd.runc.v2",
                            "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True},
                        },
                    },
                }
            }
        }
    }
    assert configs.repaired_dropin("unknown", MAIN) == on_1x  # when in doubt, the safe one
    assert containerd.release("1.6.20") == (1, 6, 20) and containerd.release("x") == (0, 0, 0)


def test_a_kubelet_node_s_main_config_and_the_toolkit_follow_its_cgroup_driver():
    node_cri = configs.kubelet_node_cri("/r/var/node/cni/bin", "/r/var/node/cni/net.d")
    real = roundtrip(configs.seed_config("/r/conf.d/*.toml", node_cri=node_cri))
    cri = real["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # this machine refuses a lower oom_score_adj
    assert cri["cni"] == {"bin_dir": "/r/var/node/cni/bin", "conf_dir": "/r/var/node/cni/net.d"}
    assert configs.systemd_cgroup(real) is False and configs.systemd_cgroup(MAIN) is True
    # the seed's main config is unchanged by the knob's existence
    assert set(MAIN["plugins"]["io.containerd.grpc.v1.cri"]) == {"containerd"}
    for version in ("1.6.20", "2.4.2"):
        runtimes = [t for _, t in find_tables(configs.repaired_dropin(version, real), ("runtimes",))][0]
        assert runtimes["nvidia"]["options"]["SystemdCgroup"] is False
    kept = configs.repaired_dropin("1.6.20", real)["plugins"]["io.containerd.grpc.v1.cri"]
    assert kept["cni"] == cri["cni"] and kept["restrict_oom_score_adj"] is True  # 1.x keeps the section whole
