"""The kubelet node's stand-in images (lab/standin/images.py): an OCI archive ctr can import."""

import importlib.util
import io
import json
import tarfile

spec = importlib.util.spec_from_file_location("images", "lab/standin/images.py")
images = importlib.util.module_from_spec(spec)
spec.loader.exec_module(images)


def test_each_name_is_an_image_running_the_program_as_its_role():
    wanted = {"registry.k8s.io/pause:3.6": "pause", "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04": "cuda"}
    data = images.archive(b"\x7fELF program", wanted)
    assert data == images.archive(b"\x7fELF program", wanted)  # the same bytes for the same inputs
    tar = tarfile.open(fileobj=io.BytesIO(data))
    blob = lambda digest: tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}").read()  # noqa: E731
    index = json.loads(tar.extractfile("index.json").read())
    assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}
    found = {}
    for entry in index["manifests"]:
        manifest = json.loads(blob(entry["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        layer = tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))
        assert layer.extractfile("standin").read() == b"\x7fELF program"
        assert layer.getmember("standin").mode == 0o755
        assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
        found[entry["annotations"]["io.containerd.image.name"]] = config["config"]["Entrypoint"]
    assert found == {name: ["/standin", role] for name, role in wanted.items()}


def test_the_read_image_is_busybox_with_sh_and_nsenter_on_path():
    data = images.busybox_archive(b"\x7fELF busybox", "docker.io/library/busybox:1.37")
    tar = tarfile.open(fileobj=io.BytesIO(data))
    blob = lambda digest: tar.extractfile(f"blobs/sha256/{digest.split(':')[1]}").read()  # noqa: E731
    [entry] = json.loads(tar.extractfile("index.json").read())["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/busybox:1.37"
    manifest = json.loads(blob(entry["digest"]))
    assert json.loads(blob(manifest["config"]["digest"]))["config"]["Env"] == ["PATH=/bin"]
    layer = tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])))
    assert layer.extractfile("bin/busybox").read() == b"\x7fELF busybox"
    assert {m.name: m.linkname for m in layer.getmembers() if m.issym()} == {
        "bin/sh": "busybox",
        "bin/nsenter": "busybox",
    }
