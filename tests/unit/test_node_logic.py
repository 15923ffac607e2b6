"""A real node's audit from reads shaped as NodeRuntime returns them, without a node or a cluster."""

import base64
import io
import tarfile

import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from gpuop.judgment.cluster_rules import cluster_gaps
from gpuop.judgment.condition import with_conditions
from gpuop.judgment.configs import nvidia_dropin, seed_config
from gpuop.judgment.containerd import sandbox_error
from gpuop.judgment.entry import node_entry
from gpuop.judgment.rules import findings
from gpuop.judgment.view import api_view, node_view, written_view
from gpuop.outputs.tables import fleet_table
from gpuop.outputs.textfile import textfile
from runbook.reach.node import NodeRuntime
from tests.helpers.nodereads import CONFIG, MAIN, RC, SOCKET, daemon, gpu_pod, kinds, node, pod, read, with_cdi

DROPIN = tomli_w.dumps(nvidia_dropin())


def test_the_daemon_the_read_asked_is_the_nodes_runtime_and_the_others_are_named():
    kubelet = {"pid": 3, "exe": "/usr/bin/kubelet", "args": [], "endpoint": "/run/other.sock"}
    view = node_view(read(daemon(pid=1, address="/run/other.sock"), daemon(pid=2, serves=False), kubelet=kubelet))
    assert view["daemon"]["pid"] == 1 and [o["pid"] for o in view["others"]] == [2]
    gaps = findings(view, [node(gpus=0)], "gpu-a")
    assert kinds(gaps) == [("second-containerd", "2")]
    assert "kubelet's endpoint" in gaps[0]["detail"]


def test_no_daemon_on_kubelets_endpoint_is_a_finding():
    kubelet = {"pid": 3, "exe": "/usr/bin/kubelet", "args": [], "endpoint": SOCKET}
    view = node_view(read(daemon(address="/run/a.sock", serves=False), kubelet=kubelet))
    gaps = findings(view, [node()], "gpu-a")
    assert kinds(gaps) == [("no-containerd", "gpu-a")] and SOCKET in gaps[0]["detail"]


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


def test_a_pod_whose_handler_goes_with_a_restart():
    view = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc",), version="2.4.2")))
    gaps = findings(view, [node(), RC, pod("p")], "gpu-a")
    assert kinds(gaps) == [("handler-gone-after-restart", "ns/p")]
    assert gaps[0]["views"] == ["scheduled", "after-restart"]


def test_a_restart_the_daemon_refuses():
    view = node_view(read(daemon(cri_ok=False, starts=False)))
    assert view["cri_after_restart"] == "refuses-start"
    assert ("restart-refuses-start", "containerd") in kinds(findings(view, [node(gpus=0)], "gpu-a"))


def test_a_restart_that_would_not_start_names_the_file_and_puts_every_pod_at_risk():
    """A version-4 drop-in beside a version-2 root, as containerd 2.3.3 refuses it (its words, as
    its restart read gives them): the finding names the file, both versions and the binary's
    words; every active Pod on the node is at risk, a GPU Pod or not."""
    v4 = "/etc/containerd/conf.d/99-nvidia.toml"
    files = {CONFIG: {"mode": "644", "text": MAIN}, v4: {"mode": "644", "text": "version = 4\n" + DROPIN}}
    d = daemon(loaded=("runc", "nvidia"), version="2.3.3", files=files, cri_ok=False, starts=False)
    d["restart"]["reason"] = "the daemon will not start: drop-in config version 4 higher than root config version 2"
    view = node_view(read(d))
    other = pod("web", runtime_class=None)
    objects = [node(), RC, pod("gpu"), other, {**pod("gone"), "status": {"phase": "Succeeded"}}]
    gaps = findings(view, objects, "gpu-a")
    refused = next(g for g in gaps if g["kind"] == "restart-refuses-start")
    assert refused["detail"] == (
        "containerd 2.3.3 would not start at its next restart, so no Pod could start on this node; "
        f"{v4} (version 4) beside {CONFIG} (version 2): the daemon will not start: drop-in config version 4 "
        "higher than root config version 2"
    )
    assert node_entry(view, gaps, node(), objects)["pods_at_risk"] == 2  # gpu and web; not the ended one
    unrestarted = findings(node_view(read(daemon(files=files_with_seed_dropin()))), [node(gpus=0)], "gpu-a")
    assert kinds(unrestarted) == [("handler-not-loaded", "nvidia")]
    report = {
        "nodes": {
            "a-unrestarted": node_entry(node_view(read(daemon())), unrestarted),
            "b-refused": node_entry(view, gaps, node(), objects),
        },
        "gaps": [],
    }
    table = fleet_table(report)
    assert [line.split(":")[0] for line in table if line.startswith("GAP")] == ["GAP b-refused"] * len(gaps) + [
        "GAP a-unrestarted"
    ]  # the node that would not start first


def files_with_seed_dropin():
    return {
        CONFIG: {"mode": "644", "text": MAIN},
        "/etc/containerd/conf.d/99-nvidia.toml": {"mode": "644", "text": DROPIN},
    }


def test_sandbox_error_is_the_versions_own():
    assert sandbox_error("1.7.35", "nvidia") == 'failed to get sandbox runtime: no runtime for "nvidia" is configured'
    assert sandbox_error("2.4.2", "nvidia").startswith('unable to get OCI runtime for sandbox "<id>": no runtime for')


def test_a_host_without_its_node_object():
    view = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc", "nvidia"))))
    assert kinds(findings(view, [node("gpu-a")], "gpu-b")) == [("no-node-object", "gpu-b")]


def test_a_toolkit_pod_ready_without_its_handler_and_gpus_without_it():
    view = node_view(read(daemon()))
    objects = [
        node(),
        pod("toolkit-x", runtime_class=None, owner="nvidia-container-toolkit-daemonset"),
        pod("other", runtime_class=None, owner="dcgm-exporter"),
    ]
    assert kinds(findings(view, objects, "gpu-a")) == [
        ("gpu-advertised-not-loaded", "gpu-a"),
        ("toolkit-ready-not-loaded", "ns/toolkit-x"),
    ]
    view_ok = node_view(read(daemon(loaded=("runc", "nvidia"), after=("runc", "nvidia"))))
    assert findings(view_ok, objects, "gpu-a") == []


def test_without_crictl_the_loaded_view_is_not_guessed():
    d = daemon()
    d["loaded"] = {"cri": "down", "runtimes": [], "default_runtime": "", "error": "exit 127", "crictl": False}
    view = node_view(read(d))
    assert view["loaded_from"] == "no-crictl"
    assert findings(view, [node(), RC, pod("p")], "gpu-a") == []  # nothing claimed that was not seen


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


def test_a_gpu_pod_without_a_class_needs_the_default_runtime_or_cdi_with_a_spec():
    objects = [node(), RC, gpu_pod("cdi")]

    def gaps(d):
        return findings(node_view(read(d)), objects, "gpu-a")

    off = gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False))
    assert [(g["kind"], g["subject"], g["views"]) for g in off] == [
        ("gpu-pod-cdi-off", "ns/cdi", ["scheduled", "loaded"])
    ]
    assert off[0]["detail"] == (
        "Pod ns/cdi asks for 2 nvidia.com/gpu with no RuntimeClass: containerd 1.7.35 runs it "
        "with its default runtime runc, and CDI is off (enable_cdi), so it drops the Pod's CDI "
        "device request silently: it starts without a GPU"
    )
    no_spec = gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True))
    assert kinds(no_spec) == [("cdi-spec-missing", "ns/cdi")]
    assert "no spec of nvidia.com/gpu devices is in /etc/cdi, /var/run/cdi" in no_spec[0]["detail"]
    assert (
        gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="2.4.2"), True, specs=["/var/run/cdi/nvidia.yaml"]))
        == []
    )
    # the legacy mode: nvidia is the default runtime, CDI plays no part
    assert gaps(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False, default="nvidia")) == []
    entry = node_entry(node_view(read(with_cdi(daemon(loaded=("nvidia", "runc"), version="1.7.35"), False))), off)
    assert entry["pods_at_risk"] == 1


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


def test_the_api_s_view_of_loaded_handlers_is_held_against_the_node_s_own():
    def reporting(*handlers):
        n = node()
        n["status"]["runtimeHandlers"] = [{"name": h, "features": {"recursiveReadOnlyMounts": True}} for h in handlers]
        return n

    loaded = node_view(read(daemon(loaded=("nvidia", "runc"), after=("nvidia", "runc"), version="2.4.2")))
    assert findings(loaded, [reporting("", "nvidia", "runc")], "gpu-a") == []  # they agree
    stale = findings(loaded, [reporting("", "runc")], "gpu-a")
    assert [(g["kind"], g["subject"], g["views"]) for g in stale] == [
        ("loaded-disagrees-with-api", "gpu-a", ["loaded", "scheduled"])
    ]
    assert stale[0]["detail"] == (
        "node gpu-a's kubelet reports (default),runc loaded (Node.status.runtimeHandlers), "
        "its containerd 2.4.2 answers nvidia,runc through CRI"
    )
    assert findings(loaded, [node()], "gpu-a") == []  # containerd 1.x reports none: only the node's read judges
    entry = node_entry(loaded, [], reporting("", "nvidia", "runc"))
    assert entry["runtime_handlers"] == ["", "nvidia", "runc"] and entry["loaded"] == ["nvidia", "runc"]
    assert node_entry(loaded, [], node())["runtime_handlers"] is None


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


def claim(name, node_name="gpu-a", driver="gpu.nvidia.com", devices=("gpu-0",)):
    """A ResourceClaim as the scheduler leaves it once it allocated devices (resource.k8s.io/v1)."""
    results = [{"request": "gpu", "driver": driver, "pool": node_name, "device": d} for d in devices]
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                    ]
                },
            }
        },
    }


def dra_pod(name, claim_name, template=False):
    p = pod(name, runtime_class=None)
    p["spec"]["containers"] = [{"name": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]
    if template:  # made from a ResourceClaimTemplate: the claim's name is in the Pod's status
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    else:
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return p


def resource_slice(node_name="gpu-a", driver="gpu.nvidia.com", devices=2):
    return {
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def test_a_node_in_the_operators_cdi_way_needs_no_handler():
    """The GPU Operator's CDI (and NRI) way: CDI on with a GPU spec, no nvidia handler. The node
    offers GPUs and its toolkit Pod is Ready: no gap of its own; a Pod that still asks for
    RuntimeClass nvidia cannot start, and is named."""
    cdi_way = with_cdi(daemon(loaded=("runc",), version="2.2.9"), True, specs=["/var/run/cdi/nvidia.yaml"])
    view = node_view(read(cdi_way))
    toolkit = pod("toolkit-x", runtime_class=None, owner="nvidia-container-toolkit-daemonset")
    assert findings(view, [node(), toolkit, gpu_pod("cdi")], "gpu-a") == []
    assert kinds(findings(view, [node(), toolkit, RC, pod("asks-nvidia")], "gpu-a")) == [
        ("sandbox-fails", "ns/asks-nvidia")
    ]
    entry = node_entry(view, [], node(), [node()])
    assert (entry["gpu_path"], entry["gpus"]) == (["cdi"], 4)
    no_spec = node_view(read(with_cdi(daemon(loaded=("runc",), version="2.2.9"), True)))
    assert kinds(findings(no_spec, [node(), toolkit], "gpu-a")) == [
        ("gpu-advertised-not-loaded", "gpu-a"),
        ("toolkit-ready-not-loaded", "ns/toolkit-x"),
    ]


def test_a_dra_gpu_pod_needs_cdi_and_is_named_with_its_claim():
    objects = [
        node(gpus=0),
        resource_slice(),
        claim("train-gpu"),
        dra_pod("train", "train-gpu"),
        claim("tmpl-gpu-x1"),
        dra_pod("tmpl", "tmpl-gpu-x1", template=True),
        claim("other", driver="example.com/fpga"),
        dra_pod("fpga", "other"),
    ]
    off = node_view(read(with_cdi(daemon(loaded=("runc", "nvidia"), version="1.7.35"), False)))
    gaps = findings(off, objects, "gpu-a")
    assert kinds(gaps) == [("dra-claim-cdi-off", "ns/tmpl"), ("dra-claim-cdi-off", "ns/train")]
    train = next(g for g in gaps if g["subject"] == "ns/train")
    assert train["detail"] == (
        "Pod ns/train's claim ns/train-gpu was allocated gpu.nvidia.com device(s) gpu-0 on "
        "gpu-a, which its driver hands containerd 1.7.35 as CDI devices, and CDI is off "
        "(enable_cdi), so it drops the claim's CDI device request silently: it starts "
        "without a GPU"
    )
    assert node_entry(off, gaps, node(gpus=0), objects)["pods_at_risk"] == 2
    assert node_entry(off, gaps, node(gpus=0), objects)["gpus"] == 2  # its ResourceSlice's devices
    on = node_view(
        read(
            with_cdi(
                daemon(loaded=("runc", "nvidia"), version="2.4.2"),
                True,
                specs=["/var/run/cdi/k8s.gpu.nvidia.com-claim_train.yaml"],
            )
        )
    )
    assert findings(on, objects, "gpu-a") == []
