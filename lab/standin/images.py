"""The lab's stand-in images, since nothing can be pulled: one OCI archive of images, each one
layer holding the stand-in program, for `ctr images import`; and the image of the node audit's
cluster reach (its read Pod's): Debian's static busybox, with sh and nsenter.

    python3 lab/standin/images.py OUT.tar STANDIN NAME=ROLE...
    python3 lab/standin/images.py --busybox OUT.tar BUSYBOX NAME

NAME is the image's full reference (registry.k8s.io/pause:3.6); ROLE is what the program says it
stands in for, and also its first argument (so each image is its own). The archive is the same
bytes for the same inputs.
"""

import hashlib
import io
import json
import sys
import tarfile

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _tar(files: dict) -> bytes:
    """A tar of ``files`` (name -> (bytes, mode), or the target of a symbolic link), with no
    time, owner or order of its own."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if isinstance(files[name], str):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, files[name], 0o777
                tar.addfile(info)
                continue
            data, mode = files[name]
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _blob(blobs: dict, media_type: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _json(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _oci(layer_files: dict, configs: dict) -> bytes:
    """The OCI archive of images of one layer (``layer_files``, as ``_tar`` takes them), by name
    -> their run config (Entrypoint, Env...)."""
    blobs, index = {}, []
    layer = _blob(blobs, LAYER, _tar(layer_files))
    for name, run in sorted(configs.items()):
        config = _blob(blobs, CONFIG, _json({
            "architecture": "amd64", "os": "linux", "config": {**run, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}))
        manifest = _blob(blobs, MANIFEST, _json({"schemaVersion": 2, "mediaType": MANIFEST,
                                                 "config": config, "layers": [layer]}))
        index.append({**manifest, "annotations": {"io.containerd.image.name": name,
                                                  "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}})
    files = {"oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644),
             "index.json": (_json({"schemaVersion": 2, "manifests": index}), 0o644)}
    files.update({f"blobs/sha256/{d.split(':', 1)[1]}": (data, 0o644) for d, data in blobs.items()})
    return _tar(files)


def archive(program: bytes, images: dict) -> bytes:
    """The OCI archive of ``images`` (name -> role), every one running ``program ROLE``.

        archive(open("standin", "rb").read(), {"registry.k8s.io/pause:3.6": "pause"})
    """
    return _oci({"standin": (program, 0o755)},
                {name: {"Entrypoint": ["/standin", role]} for name, role in images.items()})


APPLETS = ("sh", "nsenter")  # what the cluster reach's read Pod runs


def busybox_archive(busybox: bytes, name: str) -> bytes:
    """The OCI archive of image ``name``: a static busybox at /bin/busybox, each of ``APPLETS``
    a link to it on PATH.

        busybox_archive(open("/bin/busybox", "rb").read(), "docker.io/library/busybox:1.37")
    """
    files = {"bin/busybox": (busybox, 0o755), **{f"bin/{a}": "busybox" for a in APPLETS}}
    return _oci(files, {name: {"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sh"]}})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--busybox"] and len(sys.argv) == 5:
        with open(sys.argv[3], "rb") as f:
            data = busybox_archive(f.read(), sys.argv[4])
    elif len(sys.argv) >= 4 and all("=" in a for a in sys.argv[3:]):
        with open(sys.argv[2], "rb") as f:
            data = archive(f.read(), dict(a.split("=", 1) for a in sys.argv[3:]))
    else:
        sys.exit("\n".join(line.strip() for line in __doc__.strip().splitlines()[4:6]))
    with open(sys.argv[2] if sys.argv[1] == "--busybox" else sys.argv[1], "wb") as f:
        f.write(data)
