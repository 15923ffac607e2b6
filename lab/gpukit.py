"""The GPU proof's kit (lab/gpukit.sh's folder) as one file to carry to a GPU machine: a tar,
xz-compressed, the same bytes for the same files (no time, owner or order of its own), under one
top folder, gpuop-gpu-kit/. Its dictionary spans the kit (256 MiB), so that the code the three
containerds, their shims and ctr share is stored once: 53 MiB where gzip -9 gives 132.

    python3 lab/gpukit.py KIT OUT.tar.xz

OUT is written only where the kit's files changed since it was (their digests, beside it in
OUT.sums); it prints its size and how long it took.
"""

import hashlib
import io
import lzma
import os
import sys
import tarfile
import time

TOP = "gpuop-gpu-kit"
FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 256 << 20}]


def files_of(kit: str) -> list:
    """Every file and link under ``kit``, by its path inside it, in name order."""
    found = []
    for root, _, names in os.walk(kit):
        found += [os.path.relpath(os.path.join(root, n), kit) for n in names]
    return sorted(found)


def sums(kit: str) -> str:
    """One line a file: its digest (or a link's target) and path, what decides the archive."""
    lines = []
    for rel in files_of(kit):
        path = os.path.join(kit, rel)
        if os.path.islink(path):
            lines.append(f"-> {os.readlink(path)}  {rel}")
            continue
        with open(path, "rb") as f:
            lines.append(f"{hashlib.file_digest(f, 'sha256').hexdigest()} {os.stat(path).st_mode & 0o777:o}  {rel}")
    return "\n".join(lines) + "\n"


def archive(kit: str) -> bytes:
    """The kit's files as one tar.xz, the same bytes for the same files.

    archive("/cache/gpu-kit/kit")[:6] -> b"\\xfd7zXZ\\x00"
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files_of(kit):
            path = os.path.join(kit, rel)
            info = tar.gettarinfo(path, f"{TOP}/{rel}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, filters=FILTERS)


def main(kit: str, out: str) -> int:
    wanted = sums(kit)
    if os.path.exists(out) and os.path.exists(out + ".sums") and open(out + ".sums").read() == wanted:
        print(f"lab/gpukit: {out} is the kit's already ({os.path.getsize(out) / 2**20:.1f} MiB)", file=sys.stderr)
        return 0
    start = time.monotonic()
    data = archive(kit)
    with open(out + ".new", "wb") as f:
        f.write(data)
    os.replace(out + ".new", out)
    with open(out + ".sums", "w") as f:
        f.write(wanted)
    print(
        f"lab/gpukit: {out}: {len(data) / 2**20:.1f} MiB, written in {time.monotonic() - start:.0f}s", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[5].strip())
    sys.exit(main(sys.argv[1], sys.argv[2]))
