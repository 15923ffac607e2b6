"""Which processes of a runtime's binary are its daemon, as the node audit reads them on the node
(gpuop/reach/node_read.sh's ``runs_subcommand``): a ``containerd config dump`` or ``crio config``
that another reader (a second audit, the node agent, the GPU Operator's installer) runs for a
moment is not a second daemon (seen: the SSH audit and the agent reading one node at once gave a
``second-containerd`` gap the agent's condition did not have)."""

import subprocess

import pytest

from gpuop.reach.node_read import READ_SH


def subcommand(runtime: str, *args: str) -> bool:
    lines = "".join(f"{a}\n" for a in args)
    done = subprocess.run(
        ["sh", "-c", f". {READ_SH}; runs_subcommand {runtime}"], input=lines, capture_output=True, text=True, timeout=10
    )
    return done.returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("/usr/bin/containerd",),
        ("/usr/bin/containerd", "--config", "/etc/containerd/config.toml"),
        ("containerd", "-c", "config"),  # a config file named "config" is the flag's value
        (
            "containerd",
            "-c",
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "-a",
            "/run/k3s/containerd/containerd.sock",
            "--state",
            "/run/k3s/containerd",
            "--root",
            "/var/lib/rancher/k3s/agent/containerd",
        ),
    ],
)
def test_a_containerd_daemon_is_one(args):
    assert not subcommand("containerd", *args)


@pytest.mark.parametrize(
    "args",
    [
        ("/usr/bin/containerd", "config", "dump"),
        ("containerd", "--config", "/x", "config", "dump"),
        ("containerd", "--config=/x", "config", "default"),
        ("containerd", "publish", "--topic", "/t"),
    ],
)
def test_a_containerd_subcommand_is_no_daemon(args):
    assert subcommand("containerd", *args)


def test_crio_s_own_config_and_status_are_no_daemon_and_its_daemon_is_one():
    assert subcommand(
        "crio", "crio", "--config", "/etc/crio/crio.conf", "--config-dir", "/etc/crio/crio.conf.d", "config"
    )
    assert subcommand("crio", "/usr/bin/crio", "status", "--socket", "/var/run/crio/crio.sock", "config")
    assert not subcommand("crio", "/usr/bin/crio")
    assert not subcommand("crio", "crio", "--storage-driver", "vfs", "--log-level", "debug")
