"""check-runtime.sh run for real, with a fake containerd first on PATH (as the grader does)."""

import os
import shutil

import pytest

from tests.helpers.proc import run as run_process

SCRIPT = os.path.join("files", "check-runtime.sh")

NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""
RUNC_ONLY = NVIDIA.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]')[0]
LOOKALIKE = RUNC_ONLY + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia-cdi]\n'


def fake_containerd(tmp_path, dump, status=0):
    """A containerd that answers ``config dump`` with ``dump`` (and records that it was asked)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "dump.toml").write_text(dump)
    fake = bin_dir / "containerd"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\n'
        f'[ "$1 $2" = "config dump" ] || exit 2\n/bin/cat {tmp_path}/dump.toml\nexit {status}\n'
    )
    fake.chmod(0o755)
    return str(bin_dir)


def tools(tmp_path):
    """A PATH directory with just what the script needs besides containerd: grep."""
    tools_dir = tmp_path / "tools"
    tools_dir.mkdir(exist_ok=True)
    if not (tools_dir / "grep").exists():
        (tools_dir / "grep").symlink_to(shutil.which("grep"))
    return str(tools_dir)


def run(path_dirs):
    env = {**os.environ, "PATH": os.pathsep.join(path_dirs)}
    return run_process(["/bin/sh", SCRIPT], timeout_s=30, env=env)


@pytest.mark.parametrize("dump,code", [(RUNC_ONLY, 1), (NVIDIA, 0), (LOOKALIKE, 1)])
def test_judges_the_loaded_config(tmp_path, dump, code):
    result = run([fake_containerd(tmp_path, dump), tools(tmp_path)])
    assert result.returncode == code, result.stderr
    assert (tmp_path / "calls").read_text() == "config dump\n"


def test_missing_containerd_fails_with_a_reason(tmp_path):
    result = run([tools(tmp_path)])
    assert result.returncode == 1
    assert "containerd not found" in result.stderr


def test_failing_dump_fails_with_a_reason(tmp_path):
    result = run([fake_containerd(tmp_path, NVIDIA, status=3), tools(tmp_path)])
    assert result.returncode == 1
    assert "config dump' failed" in result.stderr


def test_never_reads_the_written_config_nor_calls_by_absolute_path():
    text = open(SCRIPT).read()
    assert "/etc/containerd/config.toml" not in text
    assert "/containerd config" not in text and "/bin/containerd" not in text
