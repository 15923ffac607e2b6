"""The GPU proof's judge (bench/gpu/judge.py) and its images (lab/standin/images.py), without a
daemon: what a verdict says the GPU does, the proof's observations read back, the archive."""

import importlib.util
import io
import json
import lzma
import os
import tarfile

from bench.gpu.judge import probe_pod
from gpuop.judgment import gpuproof
from gpuop.judgment.objects import of_kind


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


images = _load("images", "lab/standin/images.py")


def entry(*gaps, version="2.4.2", after="ok"):
    return {
        "runtime": "containerd",
        "version": version,
        "cri_after_restart": after,
        "gaps": [{"kind": k, "subject": s} for k, s in gaps],
    }


POD = gpuproof.pod("gpu-pod", "nvidia", 1)
CDI_POD = gpuproof.pod("cdi-pod", gpus=1)


def test_a_refused_sandbox_is_a_refusal_and_a_pod_without_gaps_gets_the_gpu_it_asks():
    assert gpuproof.forecast(entry(("sandbox-fails", "gpuop-proof/gpu-pod")), POD) == "refused"
    assert gpuproof.forecast(entry(("sandbox-fails", "gpuop-proof/other")), POD) == "gpu"  # another Pod's gap
    assert gpuproof.forecast(entry(), gpuproof.pod("plain-pod")) == "none"  # it asks for none


def test_cdi_off_drops_the_request_before_2_3_and_refuses_it_after():
    cdi_off = ("gpu-pod-cdi-off", "gpuop-proof/cdi-pod")
    assert gpuproof.forecast(entry(cdi_off, version="1.7.35"), CDI_POD) == "none"
    assert gpuproof.forecast(entry(cdi_off, version="2.3.3"), CDI_POD) == "refused"


def test_a_restart_comes_back_only_where_its_cri_would_answer():
    assert gpuproof.restart_forecast(entry()) == "back"
    assert gpuproof.restart_forecast(entry(after="refuses-start")) == "not-back"
    assert gpuproof.restart_forecast(entry(after="fails")) == "not-back"


def test_the_proofs_observations_are_read_back():
    seen = gpuproof.observed(
        'pod gpu-pod refused no runtime for "nvidia"\npod plain-pod none\n'
        "restart not-back containerd: drop-in config version 4\n"
    )
    assert seen == {
        "pods": {"gpu-pod": ("refused", 'no runtime for "nvidia"'), "plain-pod": ("none", "")},
        "restart": ("not-back", "containerd: drop-in config version 4"),
        "driver": None,
    }
    assert gpuproof.observed("driver 580.159.04\n")["driver"] == ("580.159.04", "")
    assert gpuproof.observed("driver none no nvidia-smi\n")["driver"] == ("none", "no nvidia-smi")


def test_each_stage_stands_for_a_node_that_advertises_the_gpu_and_its_pods():
    """Every stage's Node advertises the GPU; each but the driver's has its Pods."""
    for stage in gpuproof.STAGES:
        objects = gpuproof.stage_objects(stage, probe_pod())
        [node] = of_kind(objects, "Node")
        assert node["status"]["allocatable"] == {"nvidia.com/gpu": "1"}
        assert [rc["handler"] for rc in of_kind(objects, "RuntimeClass")] == ["nvidia"]
        assert of_kind(objects, "Pod") or stage == "0-driver"  # the driver's stage runs no Pod
    [probe] = of_kind(gpuproof.stage_objects("7-probe", probe_pod()), "Pod")
    assert probe["spec"]["runtimeClassName"] == "nvidia"
    assert probe["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_the_gpu_proof_archive_holds_every_pause_and_the_probe_with_its_glibc():
    libs = {name: name.encode() for name in images.GLIBC}
    args = (
        b"\x7fELF standin",
        b"\x7fELF busybox",
        "gpuop.io/gpu-probe:1",
        libs,
        ["registry.k8s.io/pause:3.8", "registry.k8s.io/pause:3.10.2"],
    )
    data = images.gpu_proof_archive(*args)
    assert data == images.gpu_proof_archive(*args)  # the same bytes for the same inputs
    tar = tarfile.open(fileobj=io.BytesIO(data))
    blob = lambda digest: tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}").read()  # noqa: E731
    found = {}
    for entry_ in json.loads(tar.extractfile("index.json").read())["manifests"]:
        manifest = json.loads(blob(entry_["digest"]))
        layer = tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))
        found[entry_["annotations"]["io.containerd.image.name"]] = layer
    assert set(found) == {"registry.k8s.io/pause:3.8", "registry.k8s.io/pause:3.10.2", "gpuop.io/gpu-probe:1"}
    assert found["registry.k8s.io/pause:3.8"].extractfile("standin").read() == b"\x7fELF standin"
    probe = found["gpuop.io/gpu-probe:1"]
    assert probe.extractfile("lib/x86_64-linux-gnu/libc.so.6").read() == b"libc.so.6"
    assert probe.getmember("lib64/ld-linux-x86-64.so.2").linkname == "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert {m.name for m in probe.getmembers() if m.issym() and m.linkname == "busybox"} == {
        f"bin/{a}" for a in images.PROBE_APPLETS
    }


gpukit = _load("gpukit", "lab/gpukit.py")


def test_the_kit_archive_is_the_same_bytes_for_the_same_files_whatever_their_times(tmp_path):
    kit = tmp_path / "kit"
    (kit / "bin").mkdir(parents=True)
    (kit / "bin" / "runc").write_bytes(b"\x7fELF runc")
    (kit / "bin" / "runc").chmod(0o755)
    (kit / "VERSIONS").write_text("runc 1.3.7\n")
    first = gpukit.archive(str(kit))
    os.utime(kit / "VERSIONS", (1, 1))  # another time: the same archive
    assert gpukit.archive(str(kit)) == first
    tar = tarfile.open(fileobj=io.BytesIO(lzma.decompress(first)))
    assert [(m.name, m.mode, m.mtime, m.uid) for m in tar.getmembers()] == [
        ("gpuop-gpu-kit/VERSIONS", 0o644, 0, 0),
        ("gpuop-gpu-kit/bin/runc", 0o755, 0, 0),
    ]
    (kit / "VERSIONS").write_text("runc 1.3.8\n")
    assert gpukit.archive(str(kit)) != first


def test_the_driver_stage_agrees_where_the_read_says_nvidia_smi_s_version_and_no_driver_gap():
    from gpuop.reach.node_read import parse

    def read(loaded: str) -> dict:
        return parse(
            [
                "--- gpuop hostname gpu-node",
                "--- gpuop driver",
                "gpu 0000:17:00.0",
                f"module nvidia {loaded}",
                f"module nvidia_uvm {loaded}",
                "lib /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04",
                "running 6.8.0-60-generic",
            ]
        )

    objects = gpuproof.stage_objects("0-driver")
    seen = gpuproof.observed("driver 580.159.04\n")
    agreed = gpuproof.judged_stage("0-driver", read("580.159.04"), seen, objects)
    assert agreed["agrees"] and agreed["checks"] == [("driver", "580.159.04", "580.159.04", "")]
    # the module of another version than the libraries': the judgment says the gap, nvidia-smi fails
    mismatch = gpuproof.judged_stage("0-driver", read("570.86.15"), seen, objects)
    assert not mismatch["agrees"] and mismatch["checks"][0][2] == "gaps driver-library-mismatch"
