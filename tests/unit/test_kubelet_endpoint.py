"""Which containerd kubelet talks to, as the node audit reads it on the node (gpuop/reach/node_read.sh):
the flag, else the last containerRuntimeEndpoint of its --config and then its --config-dir
drop-ins (*.conf, in name order), YAML or JSON, else the default; run by a real shell against
real processes whose command lines are kubelet's."""

import subprocess
import time

import pytest

from gpuop.reach.node_read import K3S_SOCKET, READ_SH

EKS_CONFIG = '{"kind":"KubeletConfiguration","containerRuntimeEndpoint":"unix:///run/eks.sock","maxPods":29}'
EKS_DROPIN = (
    '{\n  "apiVersion": "kubelet.config.k8s.io/v1beta1",\n  "containerRuntimeEndpoint": "unix:///run/dropin.sock"\n}\n'
)
RKE2_DEFAULTS = 'containerRuntimeEndpoint: "unix:///run/k3s/containerd/containerd.sock"\n'


def endpoint(tmp_path, *args, kind="kubelet", argv0="") -> str:
    """The endpoint the fact's shell finds for a process whose command line is ``kubelet ARGS``
    (or, with ``argv0``, ``ARGV0 ... ARGS``: the k3s process, of the kind the binary's name gave),
    started in ``tmp_path`` (relative paths are kubelet's working directory's)."""
    start = (
        ["bash", "-c", f"exec -a {argv0} bash -c 'read _' {' '.join(args)}"]
        if argv0
        else ["bash", "-c", "read _; :", "kubelet", *args]
    )
    proc = subprocess.Popen(start, cwd=tmp_path, stdin=subprocess.PIPE)
    # the command line read is the final one: wait (10 s at most) until the last exec is done
    final = (argv0.encode() if argv0 else b"bash") + b"\0-c\0read _"
    deadline = time.monotonic() + 10
    while not open(f"/proc/{proc.pid}/cmdline", "rb").read().startswith(final):
        assert time.monotonic() < deadline, "the process did not start within 10s"
        time.sleep(0.01)
    try:
        shell = f'. {READ_SH}; kind_of {proc.pid} {kind} && kubelet_endpoint {proc.pid}; echo "$kind $ke"'
        out = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=10, check=True)
        said_kind, _, found = out.stdout.strip().partition(" ")
        assert said_kind == "kubelet", out.stdout
        return found
    finally:
        proc.communicate(b"\n", timeout=10)


@pytest.fixture
def layouts(tmp_path):
    (tmp_path / "config.json").write_text(EKS_CONFIG)
    (tmp_path / "config.yaml").write_text(
        "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/yaml.sock\n"
    )
    (tmp_path / "empty.json").write_text('{"kind": "KubeletConfiguration"}')
    dropins = tmp_path / "config.json.d"
    dropins.mkdir()
    (dropins / "00-nodeadm.conf").write_text(EKS_DROPIN)
    (dropins / "99-later.conf.bak").write_text("containerRuntimeEndpoint: unix:///run/not-a-dropin.sock\n")
    rke2 = tmp_path / "kubelet.conf.d"
    rke2.mkdir()
    (rke2 / "00-rke2-defaults.conf").write_text(RKE2_DEFAULTS)
    (rke2 / "10-operator.conf").write_text("maxPods: 50\n")
    return tmp_path


def test_the_flag_wins_over_every_file(layouts):
    assert (
        endpoint(layouts, "--config-dir", "kubelet.conf.d", "--container-runtime-endpoint=unix:///run/flag.sock")
        == "/run/flag.sock"
    )


def test_a_config_file_yaml_or_json_compact(layouts):
    assert endpoint(layouts, "--config=config.yaml") == "/run/yaml.sock"
    assert endpoint(layouts, "--config", str(layouts / "config.json")) == "/run/eks.sock"


def test_a_drop_in_overrides_the_config_file_and_only_conf_files_count(layouts):
    """EKS AL2023: --config config.json --config-dir config.json.d."""
    assert endpoint(layouts, "--config", "config.json", "--config-dir", "config.json.d") == "/run/dropin.sock"


def test_drop_ins_alone_as_rke2_starts_kubelet(layouts):
    assert endpoint(layouts, f"--config-dir={layouts}/kubelet.conf.d") == "/run/k3s/containerd/containerd.sock"


def test_nothing_said_is_kubelet_s_default(layouts):
    assert endpoint(layouts, "--config", "empty.json") == "/run/containerd/containerd.sock"
    assert endpoint(layouts) == "/run/containerd/containerd.sock"


def test_k3s_s_kubelet_is_inside_the_k3s_process(layouts):
    """No kubelet process: the k3s process's flag, else the drop-ins under its --data-dir, else its
    own containerd's socket."""
    k3s = dict(kind="k3s", argv0="/usr/local/bin/k3s")
    assert (
        endpoint(layouts, "server", "--container-runtime-endpoint", "unix:///run/other.sock", **k3s)
        == "/run/other.sock"
    )
    dropins = layouts / "data" / "agent" / "etc" / "kubelet.conf.d"
    dropins.mkdir(parents=True)
    (dropins / "00-k3s-defaults.conf").write_text("containerRuntimeEndpoint: unix:///run/from-dropin.sock\n")
    assert endpoint(layouts, "server", f"--data-dir={layouts}/data", **k3s) == "/run/from-dropin.sock"
    assert endpoint(layouts, "agent", **k3s) == K3S_SOCKET
