"""The lab's stand-in images, since nothing can be pulled: one OCI archive of images, each one
layer holding the stand-in program, for `ctr images import`.

    python3 lab/standin/images.py OUT.tar STANDIN NAME=ROLE...

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
    """A tar of ``files`` (name -> (bytes, mode)), with no time, owner or order of its own."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            data, mode = files[name]
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _blob(blobs: dict, media_type: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def _json(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def archive(program: bytes, images: dict) -> bytes:
    """The OCI archive of ``images`` (name -> role), every one running ``program ROLE``.

        archive(open("standin", "rb").read(), {"registry.k8s.io/pause:3.6": "pause"})
    """
    blobs, index = {}, []
    layer = _blob(blobs, LAYER, _tar({"standin": (program, 0o755)}))
    for name, role in sorted(images.items()):
        config = _blob(blobs, CONFIG, _json({
            "architecture": "amd64", "os": "linux",
            "config": {"Entrypoint": ["/standin", role], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}))
        manifest = _blob(blobs, MANIFEST, _json({"schemaVersion": 2, "mediaType": MANIFEST,
                                                 "config": config, "layers": [layer]}))
        index.append({**manifest, "annotations": {"io.containerd.image.name": name,
                                                  "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}})
    files = {"oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644),
             "index.json": (_json({"schemaVersion": 2, "manifests": index}), 0o644)}
    files.update({f"blobs/sha256/{d.split(':', 1)[1]}": (data, 0o644) for d, data in blobs.items()})
    return _tar(files)


if __name__ == "__main__":
    if len(sys.argv) < 4 or any("=" not in a for a in sys.argv[3:]):
        sys.exit(__doc__.strip().splitlines()[3].strip())
    with open(sys.argv[2], "rb") as f:
        program = f.read()
    with open(sys.argv[1], "wb") as f:
        f.write(archive(program, dict(a.split("=", 1) for a in sys.argv[3:])))
