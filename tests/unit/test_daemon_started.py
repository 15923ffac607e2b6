"""When a runtime daemon started, as the node audit reads it on the node (gpuop/reach/node_read.sh's
``started``): whole seconds since the epoch, the same in every read (the audit over SSH and
through a Pod must report one value), run by a real shell against a real process whose name
holds the characters that split /proc/PID/stat wrongly."""

import shutil
import subprocess
import time

from gpuop.reach.node_read import READ_SH


def started(pid: int) -> int:
    out = subprocess.run(
        ["sh", "-c", f". {READ_SH}; started {pid}"], capture_output=True, text=True, timeout=10, check=True
    )
    return int(out.stdout)


def test_the_start_is_the_process_s_own_and_every_read_agrees(tmp_path):
    odd = tmp_path / "a) b (c"  # the name in /proc/PID/stat ends at its last ") "
    shutil.copy("/bin/sleep", odd)
    before = time.time()
    proc = subprocess.Popen([str(odd), "30"])
    after = time.time()
    try:
        reads = set()
        for _ in range(5):
            reads.add(started(proc.pid))
            time.sleep(0.3)
        assert len(reads) == 1, reads
        (got,) = reads
        assert int(before) - 1 <= got <= after, (before, got, after)
    finally:
        proc.kill()
        proc.wait(timeout=10)
