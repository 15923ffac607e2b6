"""The fleet audit's one cluster read (gpuop/reach/kubeapi.py) on the lab's real API server: which Nodes
a nodes file's node_selector takes is the API server's own judgment of the selector, set-based
terms included, never a parser of ours."""

import pytest

from gpuop.reach.kubeapi import ClusterUnreadable, read_cluster
from tests.helpers.kube import LAB_NODES, kubectl

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

LABELS = {
    "lab-node-0": ("gpuop-pool=gpu", "gpuop-spot=true"),
    "lab-node-1": ("gpuop-pool=gpu",),
    "lab-node-2": ("gpuop-pool=cpu",),
}


@pytest.fixture(scope="module")
def labelled():
    for node, labels in LABELS.items():
        kubectl("label", "--overwrite", "node", node, *labels)
    yield
    for node in LAB_NODES:
        kubectl("label", "node", node, "gpuop-pool-", "gpuop-spot-")


def nodes_read(selector: str) -> list:
    objects, how = read_cluster("", "", 20, node_selector=selector)
    assert how["reads"] == 1
    return sorted(o["metadata"]["name"] for o in objects if o["kind"] == "Node")


@pytest.mark.parametrize(
    "selector, expected",
    [
        ("gpuop-pool=gpu", ["lab-node-0", "lab-node-1"]),
        ("gpuop-pool=gpu,!gpuop-spot", ["lab-node-1"]),
        ("gpuop-pool in (gpu, cpu),gpuop-spot", ["lab-node-0"]),
        ("gpuop-pool notin (gpu)", ["lab-node-2"]),
        ("gpuop-pool!=gpu,gpuop-pool", ["lab-node-2"]),
    ],
)
def test_the_api_server_selects_the_nodes(labelled, selector, expected):
    assert nodes_read(selector) == expected


def test_no_selector_reads_every_node_and_a_bad_one_is_one_sentence(labelled):
    assert set(LAB_NODES) <= set(nodes_read(""))
    with pytest.raises(
        ClusterUnreadable,
        match=r"^the cluster cannot be read \(kubeconfig .*\): the API server "
        r"refused: 400 Bad Request$",
    ):
        read_cluster("", "", 20, node_selector="gpuop-pool in gpu")
