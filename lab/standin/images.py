"""The lab's stand-in images, since nothing can be pulled: one OCI archive of images, each one
layer holding the stand-in program, for `ctr images import`; the image of the node audit's
cluster reach (its read Pod's): Debian's static busybox, with sh and nsenter; and the GPU proof's
(bench/gpu): both in one archive, beside a probe image of busybox and a glibc, in which the
driver's `nvidia-smi`, mounted by CDI, runs.

    python3 lab/standin/images.py OUT.tar STANDIN NAME=ROLE...
    python3 lab/standin/images.py --busybox OUT.tar BUSYBOX NAME
    python3 lab/standin/images.py --gpu-proof OUT.tar STANDIN BUSYBOX PROBE_NAME LIBDIR PAUSE_NAME...

NAME is the image's full reference (registry.k8s.io/pause:3.6); ROLE is what the program says it
stands in for, and also its first argument (so each image is its own). The archive is the same
bytes for the same inputs.
"""

import hashlib
import io
import json
import os
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


def _oci(*images: tuple) -> bytes:
    """The OCI archive of ``images``, each a pair: one layer's files (as ``_tar`` takes them),
    and the names of the images of that layer -> their run config (Entrypoint, Env...)."""
    blobs, index = {}, []
    for layer_files, configs in images:
        layer = _blob(blobs, LAYER, _tar(layer_files))
        for name, run in sorted(configs.items()):
            config = _blob(
                blobs,
                CONFIG,
                _json(
                    {
                        "architecture": "amd64",
                        "os": "linux",
                        "config": {**run, "WorkingDir": "/"},
                        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
                    }
                ),
            )
            manifest = _blob(
                blobs, MANIFEST, _json({"schemaVersion": 2, "mediaType": MANIFEST, "config": config, "layers": [layer]})
            )
            index.append(
                {
                    **manifest,
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            )
    files = {
        "oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644),
        "index.json": (_json({"schemaVersion": 2, "manifests": index}), 0o644),
    }
    files.update({f"blobs/sha256/{d.split(':', 1)[1]}": (data, 0o644) for d, data in blobs.items()})
    return _tar(files)


def archive(program: bytes, images: dict) -> bytes:
    """The OCI archive of ``images`` (name -> role), every one running ``program ROLE``.

    archive(open("standin", "rb").read(), {"registry.k8s.io/pause:3.6": "pause"})
    """
    return _oci(_standin(program, images))


def _standin(program: bytes, images: dict) -> tuple:
    return {"standin": (program, 0o755)}, {name: {"Entrypoint": ["/standin", role]} for name, role in images.items()}


APPLETS = ("sh", "nsenter")  # what the cluster reach's read Pod runs


def busybox_archive(busybox: bytes, name: str) -> bytes:
    """The OCI archive of image ``name``: a static busybox at /bin/busybox, each of ``APPLETS``
    a link to it on PATH.

        busybox_archive(open("/bin/busybox", "rb").read(), "docker.io/library/busybox:1.37")
    """
    files = {"bin/busybox": (busybox, 0o755), **{f"bin/{a}": "busybox" for a in APPLETS}}
    return _oci((files, {name: {"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sh"]}}))


# What the GPU proof's containers run: busybox's sh, sleep and ls; and the glibc that the driver's
# nvidia-smi (mounted in by CDI, with its NVML library) links against.
PROBE_APPLETS = ("sh", "sleep", "ls", "cat", "true")
GLIBC = ("ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")


def gpu_proof_archive(standin: bytes, busybox: bytes, probe: str, libs: dict, pauses: list) -> bytes:
    """The GPU proof's one archive: the stand-in pause under each name in ``pauses`` (every
    runtime's own sandbox image), and image ``probe``: busybox with ``PROBE_APPLETS``, and
    ``libs`` (file name -> bytes: ``GLIBC``) in /lib/x86_64-linux-gnu, its loader also at /lib64.

        gpu_proof_archive(standin, busybox, "gpuop.io/gpu-probe:1", {"libc.so.6": b"..."},
            ["registry.k8s.io/pause:3.10"])
    """
    files = {
        "bin/busybox": (busybox, 0o755),
        **{f"bin/{a}": "busybox" for a in PROBE_APPLETS},
        **{f"lib/x86_64-linux-gnu/{name}": (data, 0o755) for name, data in libs.items()},
        "lib64/ld-linux-x86-64.so.2": "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    }
    run = {"Env": ["PATH=/usr/bin:/bin"], "Entrypoint": ["/bin/sh"]}
    return _oci(_standin(standin, dict.fromkeys(pauses, "pause")), (files, {probe: run}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--busybox"] and len(sys.argv) == 5:
        with open(sys.argv[3], "rb") as f:
            data = busybox_archive(f.read(), sys.argv[4])
    elif sys.argv[1:2] == ["--gpu-proof"] and len(sys.argv) >= 8:
        read = lambda path: open(path, "rb").read()  # noqa: E731
        data = gpu_proof_archive(
            read(sys.argv[3]),
            read(sys.argv[4]),
            sys.argv[5],
            {n: read(os.path.join(sys.argv[6], n)) for n in GLIBC},
            sys.argv[7:],
        )
    elif len(sys.argv) >= 4 and all("=" in a for a in sys.argv[3:]):
        with open(sys.argv[2], "rb") as f:
            data = archive(f.read(), dict(a.split("=", 1) for a in sys.argv[3:]))
    else:
        sys.exit("\n".join(line.strip() for line in __doc__.strip().splitlines()[6:9]))
    with open(sys.argv[2] if sys.argv[1].startswith("--") else sys.argv[1], "wb") as f:
        f.write(data)
