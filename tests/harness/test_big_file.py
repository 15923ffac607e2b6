"""Files of any size are written, none through one giant argument (a single argument to the
kernel is capped at 128 KiB; issue 21)."""

import pytest

from tests.helpers.playbook import PYINFRA, target_commands
from tests.helpers.proc import run

LIMIT = 128 * 1024


@pytest.mark.parametrize("size", [1000, 300 * 1024])
def test_a_file_of_any_size_is_written_whole_and_a_rerun_leaves_it(tmp_path, size):
    path = tmp_path / "out" / "big.txt"
    args = [
        PYINFRA,
        "@local",
        "tests/harness/big_file.py",
        "-y",
        "--debug",
        "--data",
        f"path={path}",
        "--data",
        f"size={size}",
    ]
    wrote = run(args, timeout_s=120)
    assert wrote.returncode == 0, wrote.stderr
    body = path.read_text()
    assert len(body) == size and body.startswith("0123456789abcdef") and oct(path.stat().st_mode)[-3:] == "644"
    longest = max(len(line) for line in wrote.stderr.splitlines() if "Running command on " in line)
    assert longest < LIMIT, longest  # the debug line holds the whole command
    assert target_commands(wrote.stderr)  # the file was written by commands on the target
    mtime = path.stat().st_mtime_ns
    again = run(args, timeout_s=120)
    assert again.returncode == 0 and "No changes" in again.stderr, again.stderr
    assert path.stat().st_mtime_ns == mtime
