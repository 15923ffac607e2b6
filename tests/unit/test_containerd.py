"""Merge analysis of containerd configs, on documents parsed exactly as the playbook writes them."""

import tomllib

import tomli_w

from gpuop import containerd
from gpuop.tomlpath import key_path, quote_key


def roundtrip(doc):
    return tomllib.loads(tomli_w.dumps(doc))


MAIN = roundtrip(containerd.main_config("/root/gpuop/etc/containerd/conf.d/*.toml"))
DROPIN = roundtrip(containerd.nvidia_dropin())


def test_written_main_config_has_the_quoted_plugin_hierarchy():
    text = tomli_w.dumps(containerd.main_config("/r/conf.d/*.toml"))
    assert '[plugins."io.containerd.grpc.v1.cri".containerd]' in text
    cri = MAIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert MAIN["version"] == 2
    assert MAIN["imports"][0].endswith("conf.d/*.toml")
    assert cri["default_runtime_name"] == "runc"
    assert cri["runtimes"]["runc"] == {"runtime_type": "io.containerd.runc.v2",
                                       "options": {"SystemdCgroup": True}}


def test_unquoted_key_builds_another_hierarchy():
    doc = tomllib.loads('[plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc]\nx = 1\n')
    assert "io.containerd.grpc.v1.cri" not in doc["plugins"]
    assert containerd.runtime_names(doc) == ["runc"]
    assert containerd.analyze_merge(MAIN, [doc]).conflict_table is None


def test_dropin_declares_nvidia_with_the_same_cgroup_driver():
    nvidia = DROPIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime",
                                 "SystemdCgroup": True}


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
    dump = {"plugins": {"io.containerd.cri.v1.runtime": {"containerd": {"runtimes": {
        "runc": {}, "nvidia": {}}}}}}
    assert containerd.runtime_names(dump) == ["runc", "nvidia"]


def test_relative_imports_resolve_against_the_main_config():
    assert containerd.import_globs({"imports": ["conf.d/*.toml", "/abs/x.toml"]},
                                   "/etc/containerd/config.toml") == [
        "/etc/containerd/conf.d/*.toml", "/abs/x.toml"]


def test_key_quoting():
    assert quote_key("runtimes") == "runtimes"
    assert quote_key("io.containerd.grpc.v1.cri") == '"io.containerd.grpc.v1.cri"'
    assert quote_key('a"b') == '"a\\"b"'
    path = key_path(("plugins", "io.containerd.grpc.v1.cri", "containerd"))
    assert tomllib.loads(f"[{path}]\nk = 1\n")["plugins"]["io.containerd.grpc.v1.cri"]["containerd"] == {"k": 1}


DATA = "tests/unit/data"


def dump(name):
    """A real `containerd config dump` (see tests/unit/data/README)."""
    with open(f"{DATA}/{name}", "rb") as f:
        return tomllib.load(f)


def test_restart_forecast_of_the_incident_on_1_6_replaces_the_cri_section():
    forecast = containerd.restart_forecast(dump("dump-1.6.20-incident.toml"))
    assert forecast.runtimes == ["nvidia"] and forecast.default_runtime == "runc"
    assert not forecast.cri_ok
    assert forecast.reason == ('default_runtime_name "runc" has no runtime in containerd.runtimes '
                               "(configured: nvidia)")


def test_restart_forecast_of_the_main_config_alone_loads():
    forecast = containerd.restart_forecast(dump("dump-1.6.20-main-only.toml"))
    assert (forecast.runtimes, forecast.default_runtime, forecast.cri_ok, forecast.reason) == (
        ["runc"], "runc", True, "")


def test_restart_forecast_without_a_default_runtime_fails():
    doc = {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {"runtimes": {"runc": {}}}}}}
    forecast = containerd.restart_forecast(doc)
    assert not forecast.cri_ok and "no default_runtime_name" in forecast.reason


def test_unreadable_config_is_a_failed_start():
    forecast = containerd.unreadable_config("toml: line 3: expected '='")
    assert (forecast.runtimes, forecast.cri_ok) == ([], False)
    assert forecast.reason == "containerd cannot read its config: toml: line 3: expected '='"


def test_binary_version():
    assert containerd.binary_version(
        "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3") == "1.6.20"
    assert containerd.binary_version("containerd github.com/containerd/containerd/v2 v2.4.2 ") == "2.4.2"
    assert containerd.binary_version("") == "unknown"


def test_cri_runtimes_reads_the_handlers_crictl_reports():
    info = {"config": {"containerd": {"runtimes": {"runc": {"runtimeType": "io.containerd.runc.v2"},
                                                   "nvidia": {}},
                                      "defaultRuntimeName": "runc"}}}
    assert containerd.cri_runtimes(info) == (["runc", "nvidia"], "runc")
    assert containerd.cri_runtimes({}) == ([], "")


def test_restart_lines():
    fails = containerd.restart_forecast(dump("dump-1.6.20-incident.toml"))
    assert containerd.restart_lines("1.6.20", ["runc"], "cri", fails) == [
        "CONTAINERD_VERSION=1.6.20", "LOADED_RUNTIMES=runc", "LOADED_FROM=cri",
        "RESTART_RUNTIMES=nvidia", "RESTART_CRI=fails",
        'RESTART_REASON=default_runtime_name "runc" has no runtime in containerd.runtimes (configured: nvidia)']
    ok = containerd.Forecast(["nvidia", "runc"], "runc", True, "")
    assert containerd.restart_lines("2.4.2", ["runc"], "cri", ok)[3:] == [
        "RESTART_RUNTIMES=nvidia,runc", "RESTART_CRI=ok"]
    assert containerd.restart_lines("none", ["runc"], "recorded", None) == [
        "CONTAINERD_VERSION=none", "LOADED_RUNTIMES=runc", "LOADED_FROM=recorded",
        "RESTART_RUNTIMES=", "RESTART_CRI=unknown", "RESTART_REASON=no lab containerd on this host to ask"]


def test_dropin_keeping_cri_carries_the_main_config_section():
    doc = roundtrip(containerd.dropin_keeping_cri(MAIN, DROPIN))
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "runc"
    assert list(cri["runtimes"]) == ["runc", "nvidia"]
    assert "imports" not in doc and "version" not in doc
    assert MAIN["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"].keys() == {"runc"}


def test_repaired_dropin_follows_the_version_s_merge():
    assert containerd.repaired_dropin("2.4.2", MAIN) == containerd.nvidia_dropin()
    on_1x = containerd.repaired_dropin("1.6.20", MAIN)
    # SPEC's two runtimes, and the main config's default, in the one CRI section 1.x keeps whole.
    assert on_1x == {"plugins": {"io.containerd.grpc.v1.cri": {"containerd": {
        "default_runtime_name": "runc",
        "runtimes": {
            "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}},
            "nvidia": {"runtime_type": "io.containerd.runc.v2",
                       "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}},
        }}}}}
    assert containerd.repaired_dropin("unknown", MAIN) == on_1x  # when in doubt, the safe one
    assert containerd.release_major("1.6.20") == 1 and containerd.release_major("x") == 0


def test_restart_forecast_of_the_incident_on_2_4_merges_deeply():
    doc = dump("dump-2.4.2-incident.toml")
    assert doc["version"] == 4 and "io.containerd.cri.v1.runtime" in doc["plugins"]
    forecast = containerd.restart_forecast(doc)
    assert (forecast.runtimes, forecast.default_runtime, forecast.cri_ok) == (["nvidia", "runc"], "runc", True)
