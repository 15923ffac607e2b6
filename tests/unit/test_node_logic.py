"""A real node's read as NodeRuntime returns it (its sections, the written and CDI views, crictl's
words) and the reports made from it, without a node or a cluster; the rules it feeds are tested
in test_runtime_rules, test_node_rules and test_sandbox."""

import base64
import io
import tarfile

import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from gpuop.judgment.cluster_rules import cluster_gaps
from gpuop.judgment.condition import with_conditions
from gpuop.judgment.configs import seed_config
from gpuop.judgment.containerd import sandbox_error
from gpuop.judgment.entry import node_entry
from gpuop.judgment.rules import findings
from gpuop.judgment.view import api_view, node_view, written_view
from gpuop.outputs.tables import fleet_table
from gpuop.outputs.textfile import textfile
from runbook.reach.node import NodeRuntime
from tests.helpers.nodereads import CONFIG, DROPIN, MAIN, RC, SOCKET, daemon, gpu_pod, kinds, node, pod, read, with_cdi


def test_written_view_follows_imports_and_names_unreached_dropins():
    files = {
        CONFIG: {"mode": "644", "text": MAIN},
        "/etc/containerd/conf.d/99-nvidia.toml": {"mode": "644", "text": DROPIN},
    }
    assert written_view(CONFIG, files) == {
        "runtimes": ["runc", "nvidia"],
        "dropins": ["/etc/containerd/conf.d/99-nvidia.toml"],
        "unreached": [],
        "errors": [],
        "imports": ["/etc/containerd/conf.d/*.toml"],
        "versions": {CONFIG: 2, "/etc/containerd/conf.d/99-nvidia.toml": 1},
    }
    missed = tomli_w.dumps(seed_config("/etc/containerd/config.d/*.toml"))
    backup = {"/etc/containerd/conf.d/99-nvidia.toml.gpuop-bak.20261203T093812": {"mode": "644", "text": DROPIN}}
    assert written_view(CONFIG, {**files, **backup})["unreached"] == []  # a backup is no drop-in
    view = written_view(CONFIG, {**files, **backup, CONFIG: {"mode": "644", "text": missed}})
    assert view["runtimes"] == ["runc"] and view["unreached"] == ["/etc/containerd/conf.d/99-nvidia.toml"]
    broken = written_view(CONFIG, {CONFIG: {"mode": "644", "text": "version = ["}})
    assert broken["errors"] and "is not valid TOML" in broken["errors"][0]


def test_sandbox_error_is_the_versions_own():
    assert sandbox_error("1.7.35", "nvidia") == 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    assert sandbox_error("2.4.2", "nvidia").startswith('unable to get OCI runtime for sandbox "<id>": no runtime for')


def test_fleet_table_json_and_textfile_from_one_report():
    healthy = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc", "nvidia"))))
    incident = node_view(read(daemon(after=("nvidia",), cri_ok=False)))
    objects = [
        node("a"),
        node("b"),
        RC,
        pod("p", "b"),
        {"kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata"},
    ]
    nodes = {
        "a": with_conditions(node_entry(healthy, findings(healthy, objects, "a"))),
        "b": with_conditions(node_entry(incident, findings(incident, objects, "b"))),
    }
    report = {"nodes": nodes, "gaps": cluster_gaps(nodes, objects)}
    assert [g["subject"] for g in report["gaps"]] == ["kata"]
    assert [g["kind"] for g in nodes["b"]["gaps"]] == [
        "restart-takes-cri-down",
        "sandbox-fails",
        "gpu-advertised-not-loaded",
    ]
    lines = fleet_table(report)
    assert lines[0].split() == [
        "NODE",
        "RUNTIME",
        "LOADED",
        "AFTER",
        "RESTART",
        "CRI",
        "AFTER",
        "RESTART",
        "GPU",
        "PATH",
        "PODS",
        "AT",
        "RISK",
        "GAPS",
        "PROBLEM",
        "RESTART",
        "UNSAFE",
    ]
    row_a = ["a", "containerd", "1.6.20", "runc,nvidia", "runc,nvidia", "ok", "handler", "0", "0", "False", "False"]
    assert lines[1].split() == row_a
    assert lines[2].split() == ["b", "containerd", "1.6.20", "runc", "nvidia", "fails", "-", "1", "3", "True", "True"]
    # each gap says the condition it sets: the restart's forecast, or the node now
    assert lines[3].startswith("GAP b: [restart-takes-cri-down]") and lines[3].endswith(
        "(sets GPURuntimeRestartUnsafe)"
    )
    assert lines[4].startswith("GAP b: [sandbox-fails]") and lines[4].endswith("(sets GPURuntimeProblem)")
    assert lines[-1] == "4 gap(s) on 2 node(s)"  # b's three and the fleet's own
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(textfile(report))
        for s in f.samples
    }
    assert samples[("gpuop_node_gap_count", (("node", "b"),))] == 3
    assert samples[("gpuop_node_pods_at_risk", (("node", "b"),))] == 1
    assert samples[("gpuop_node_cri_after_restart", (("node", "b"), ("state", "fails")))] == 1
    assert samples[("gpuop_node_runtime_handler", (("handler", "nvidia"), ("node", "a"), ("view", "loaded")))] == 1
    unsafe = (("condition", "GPURuntimeRestartUnsafe"), ("node", "b"), ("status", "True"))
    assert samples[("gpuop_node_condition", unsafe)] == 1
    assert (
        samples[("gpuop_node_condition", (("condition", "GPURuntimeProblem"), ("node", "a"), ("status", "False")))] == 1
    )


def _tar(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def test_node_runtime_parses_its_sections():
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    output = [
        "--- gpuop hostname gpu-a",
        "--- gpuop kubelet 7",
        "/usr/bin/kubelet",
        b64("kubelet\0--config\0/var/lib/kubelet/config.yaml\0"),
        SOCKET,
        "--- gpuop containerd 8",
        "/opt/containerd",
        b64("/opt/containerd\0-a\0/run/b.sock\0"),
        CONFIG,
        "/run/b.sock",
        "--- gpuop containerd 9",
        "/usr/bin/containerd",
        b64("/usr/bin/containerd\0"),
        CONFIG,
        SOCKET,
        "--- gpuop runtime 9",
        _tar({CONFIG: MAIN}),
        "--- gpuop restart",
        "containerd github.com/containerd/containerd 1.6.20~ds1 x",
        MAIN,
        "--- gpuop cri",
        '{"config": {"containerd": {"runtimes": {"runc": {}}, "defaultRuntimeName": "runc"}}}',
        "0",
    ]
    got = NodeRuntime().process("\n".join(output).splitlines())
    assert got["hostname"] == "gpu-a" and got["kubelet"]["args"] == [
        "kubelet",
        "--config",
        "/var/lib/kubelet/config.yaml",
    ]
    assert got["kubelet"]["endpoint"] == SOCKET
    other, d = got["containerds"]
    assert (other["pid"], other["address"], other["serves"], other["loaded"]) == (8, "/run/b.sock", False, None)
    assert (d["pid"], d["config"], d["address"], d["serves"], list(d["files"])) == (9, CONFIG, SOCKET, True, [CONFIG])
    assert d["restart"]["version"] == "1.6.20" and d["restart"]["runtimes"] == ["runc"]
    assert d["loaded"]["runtimes"] == ["runc"] and d["loaded"]["cri"] == "ok"
    view = node_view(got)
    assert view["daemon"]["pid"] == 9 and view["kubelet_endpoint"] == SOCKET and view["others"][0]["pid"] == 8


def test_crictl_words_without_its_log_decoration():
    from runbook.reach.containerd import cri_answer

    line = (
        'time="2026-12-01T11:11:59Z" level=fatal msg="validate service connection: validate CRI v1 runtime '
        'API for endpoint \\"unix:///run/containerd/containerd.sock\\": rpc error: code = Unimplemented desc '
        '= unknown service runtime.v1.RuntimeService"'
    )
    got = cri_answer([line, "1"])
    assert got["cri"] == "down" and got["error"] == (
        "validate service connection: validate CRI v1 runtime API for endpoint "
        '"unix:///run/containerd/containerd.sock": rpc error: code = Unimplemented desc = unknown service '
        "runtime.v1.RuntimeService"
    )
    assert cri_answer(["sh: crictl: not found", "127"])["crictl"] is False


def test_the_cdi_view_is_read_from_crictl_and_the_spec_dirs():
    from runbook.reach.containerd import cri_answer

    answer = cri_answer(
        [
            '{"config": {"enableCDI": true, "cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"],',
            ' "containerd": {"runtimes": {"runc": {}}, "defaultRuntimeName": "runc"}}}',
            "0",
        ]
    )
    assert (answer["cdi"], answer["cdi_spec_dirs"]) == (True, ["/etc/cdi", "/var/run/cdi"])
    assert cri_answer(["crictl: connection refused", "1"])["cdi"] is False


def test_cdi_unsaid_is_on_from_2_0_and_off_before():
    """containerd 2.4's CRI status has no enableCDI (CDI is always on there): a GPU Pod with no
    RuntimeClass on it is judged by its specs, not refused as "CDI off"; 1.7 unsaid is off."""
    from runbook.reach.containerd import cri_answer

    unsaid = cri_answer(
        [
            '{"config": {"cdiSpecDirs": ["/etc/cdi", "/var/run/cdi"],',
            ' "containerd": {"runtimes": {"runc": {}}, "defaultRuntimeName": "runc"}}}',
            "0",
        ]
    )
    objects = [node(), RC, gpu_pod("cdi")]
    for version, specs, expected in (
        ("2.4.2", [], [("cdi-spec-missing", "ns/cdi")]),
        ("2.4.2", ["/var/run/cdi/nvidia.yaml"], []),
        ("1.7.35", [], [("gpu-pod-cdi-off", "ns/cdi")]),
    ):
        d = daemon(loaded=("runc",), version=version)
        d["loaded"] = {**unsaid, "runtimes": ["runc", "nvidia"]}
        d["gpu_cdi_specs"] = specs
        view = node_view(read(d))
        assert view["cdi"]["enabled"] is (version == "2.4.2")
        assert kinds(findings(view, objects, "gpu-a")) == expected, version
    said_off = with_cdi(daemon(loaded=("nvidia", "runc"), version="2.2.9"), False)  # enable_cdi = false
    assert kinds(findings(node_view(read(said_off)), objects, "gpu-a")) == [("gpu-pod-cdi-off", "ns/cdi")]


def test_a_node_not_read_is_judged_on_what_its_kubelet_reports_alone():
    reporting = {**node(), "status": {**node()["status"], "runtimeHandlers": [{"name": ""}, {"name": "runc"}]}}
    view = api_view(reporting)
    assert (view["loaded"], view["loaded_from"], view["after_restart"]) == (["runc"], "api", [])
    gaps = findings(
        view, [reporting, RC, pod("gpu"), pod("tk", runtime_class=None, owner="gpu-container-toolkit")], "gpu-a"
    )
    assert kinds(gaps) == [
        ("gpu-advertised-not-loaded", "gpu-a"),
        ("sandbox-fails", "ns/gpu"),
        ("toolkit-ready-not-loaded", "ns/tk"),
    ]
    assert (
        "its kubelet reports only runc loaded (Node.status.runtimeHandlers; the node itself was not read)"
        in next(g for g in gaps if g["kind"] == "sandbox-fails")["detail"]
    )
    entry = node_entry(view, gaps, reporting)
    assert entry["runtime_handlers"] == ["", "runc"] and entry["loaded_from"] == "api"
    assert "runc (api)" in fleet_table({"nodes": {"gpu-a": entry}, "gaps": []})[1]
    assert api_view(node()) is None  # a node that reports none (containerd 1.x): only its read judges it
