"""Bad input to either inventory is one sentence, naming the file and what to do, with no
traceback and nothing run (issue 28): the real pyinfra, the real entry points."""

import os

import pytest

from tests.helpers.playbook import PYINFRA
from tests.helpers.proc import run

CASES = [
    (
        "inventory.py",
        "deploy.py",
        "GPUOP_HOSTS",
        None,
        "{f}: no such file; list the lab hosts in one (see hosts.example.yaml), or point GPUOP_HOSTS at one",
    ),
    (
        "nodes.py",
        "audit.py",
        "GPUOP_NODES",
        None,
        "{f}: no such file; list the nodes to audit in one (see nodes.example.yaml), or point GPUOP_NODES at one",
    ),
    (
        "nodes.py",
        "audit.py",
        "GPUOP_NODES",
        "hosts: [",
        "{f}: not valid YAML at line 1, column 9: expected the node content, but found '<stream end>'",
    ),
    (
        "nodes.py",
        "audit.py",
        "GPUOP_NODES",
        "hosts:\n  gpu-a: {ssh_hostname: 10.0.0.5, ssh_password: x}\n",
        "{f}: host gpu-a: key ssh_password is refused: no password or secret in a file; use an SSH key "
        "(ssh_key) and passwordless sudo",
    ),
    (
        "nodes.py",
        "audit.py",
        "GPUOP_NODES",
        "hosts:\n  a: {ssh_hostname: x}\noverrides: {a: {ssh_port: 2}}\n",
        "{f}: overrides and node_selector apply to the nodes the cluster lists; with hosts listed, set each host's "
        "own keys",
    ),
    # no hosts: the cluster lists them, and one that cannot be read says so, and the way out
    (
        "nodes.py",
        "audit.py",
        "GPUOP_NODES",
        "defaults: {kube_context: no-such-context}\n",
        (
            "Expected object with name no-such-context in ",
            "/contexts list; with no hosts in a nodes file, the GPU "
            "nodes are listed from the cluster (or list them: see nodes.example.yaml, GPUOP_NODES)",
        ),
    ),
    (
        "inventory.py",
        "deploy.py",
        "GPUOP_HOSTS",
        "hosts:\n  lab-a: {ssh_hostname: 10.0.0.5, node_name: x}\n",
        "{f}: host lab-a: unknown key node_name; expected one of ",
    ),
]

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: lab, user: {}}]
contexts: [{name: lab, context: {cluster: lab, user: lab}}]
current-context: lab
"""


@pytest.mark.parametrize("inventory,script,env,text,said", CASES)
def test_a_bad_hosts_or_nodes_file_is_one_sentence(tmp_path, inventory, script, env, text, said):
    path = tmp_path / "hosts.yaml"
    if text is not None:
        path.write_text(text)
    # a kubeconfig of its own (one context, not the one asked for): the machine's own may not exist yet
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    result = run(
        [PYINFRA, inventory, script, "-y"],
        timeout_s=60,
        env={**os.environ, env: str(path), "KUBECONFIG": str(kubeconfig)},
    )
    assert result.returncode != 0
    assert f"--> pyinfra error in {inventory} line " in result.stderr, result.stderr
    for part in said if isinstance(said, tuple) else (said,):  # the kubeconfig's path comes between
        assert part.format(f=path) in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert "--> Preparing operations" not in result.stderr + result.stdout  # nothing planned, nothing run
