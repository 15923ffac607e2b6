"""The lab's real containerd daemon, seen and handled from a test as an operator would."""

import json
import os
import subprocess
import time

import tomli_w

from gpuop.judgment import configs
from gpuop.layout import Layout
from lab import labproc
from tests.helpers import ROOT as HERE  # the project
from tests.helpers.playbook import lab_daemon_pid, wait_gone
from tests.helpers.proc import run

DEBIAN = "/usr/bin/containerd"


def binary(version: str) -> str:
    """The lab's containerd of ``version``: Debian's package for 1.6.20, else built as the
    project builds it (cached after the first build)."""
    if version == "1.6.20":
        return DEBIAN
    out = run([os.path.join(HERE, "lab/build.sh"), "containerd", version], timeout_s=1800, check=True)
    return os.path.join(out.stdout.strip(), "containerd")


def built(component: str, name: str, *version: str) -> str:
    """A lab binary as lab/build.sh builds it (cached after the first build)."""
    out = run([os.path.join(HERE, "lab/build.sh"), component, *version], timeout_s=1800, check=True)
    return os.path.join(out.stdout.strip(), name)


def crictl() -> str:
    return built("crictl", "crictl")


def crio_binary() -> str:
    """The lab's CRI-O (``CRIO_VERSION``), pinns beside it."""
    return built("crio", "crio")


def nvidia_ctk(name: str = "nvidia-ctk") -> str:
    """The toolkit's CLI, or its installer (``nvidia-ctk-installer``) of the same release."""
    return built("nvidia-ctk", name)


def nvidia_ctk_of(version: str) -> str:
    """The toolkit's CLI of one of the lab's releases (``NVIDIA_CTK_VERSIONS``)."""
    return built("nvidia-ctk", "nvidia-ctk", version)


def lab_daemons(root) -> list:
    """Every process running as a containerd daemon on ``root``'s lab (``--root`` on its command
    line), whatever its pid file says."""
    return labproc.holding(Layout(str(root)).containerd_root)


def socket(root):
    return root / "run/containerd/containerd.sock"


def crictl_info(root):
    """``crictl info`` against the lab daemon: (exit code, parsed JSON or crictl's error text)."""
    asked = run(
        ["crictl", "--config", "/dev/null", "--runtime-endpoint", f"unix://{socket(root)}", "--timeout", "3s", "info"],
        timeout_s=15,
    )
    return asked.returncode, (json.loads(asked.stdout) if asked.returncode == 0 else asked.stderr)


def loaded(root) -> list:
    code, info = crictl_info(root)
    assert code == 0, info
    return sorted(info["config"]["containerd"]["runtimes"])


def kill(root):
    """The lab daemon dies (as in a crash): SIGKILL, no clean shutdown."""
    pid = lab_daemon_pid(root)
    assert pid, "no lab containerd runs under " + str(root)
    os.kill(pid, 9)
    wait_gone(pid)


def restart(root, containerd_binary):
    """Restart the lab daemon by hand, with the files as they are now on disk: what an operator
    (or a node reboot) does. Waits until it answers on its socket, CRI or not."""
    pid = lab_daemon_pid(root)
    if pid:
        os.kill(pid, 15)
        wait_gone(pid)
    args = [
        containerd_binary,
        "--config",
        f"{root}/etc/containerd/config.toml",
        "--root",
        f"{root}/var/lib/containerd",
        "--state",
        f"{root}/run/containerd",
        "--address",
        str(socket(root)),
    ]
    with open(root / "var/log/containerd.log", "a") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    (root / "run/containerd.pid").write_text(f"{proc.pid}\n")
    for _ in range(300):
        if socket(root).exists() and "connect: " not in str(crictl_info(root)[1]):  # dialled
            return proc.pid
        time.sleep(0.1)
    raise AssertionError(f"restarted containerd does not answer: {crictl_info(root)}")


def write_dropin_keeping_runc(root):
    """Replace the drop-in with one in the toolkit 1.18 style: the whole CRI section, runc kept."""
    main = configs.seed_config(f"{root}/etc/containerd/conf.d/*.toml")
    text = tomli_w.dumps(configs.dropin_keeping_cri(main, configs.nvidia_dropin()))
    (root / "etc/containerd/conf.d/99-nvidia.toml").write_text(text)


def check_loaded(root):
    """The deployed bin/check-loaded.sh, run for real."""
    return run([str(root / "bin/check-loaded.sh")], timeout_s=30)
