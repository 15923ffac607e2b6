"""The one door to the judgment of a runtime (``judge``): a node's runtime view
(``gpuop.judgment.view``) joined with the cluster's objects, as gaps (``gpuop.judgment.gaps``), in its
entry (``gpuop.judgment.entry``). The lab audit, the node audit, the repair's plan and its audit after
all call it. Each rule is written once, in the room of what it judges: a runtime alone
(``runtime_rules``), the node it serves (``node_rules``, the sandboxes' words in ``sandbox``), the
cluster around the runtimes (``cluster_rules``: ``cluster_gaps`` for a fleet), the node's NVIDIA
driver (``driver_rules``).

Subjects: a finding about the daemon itself names the runtime (``containerd``), one about a
handler names the handler, one about a Pod ``namespace/name``, one about a Node its name, one
about a file its path.
"""

from gpuop.judgment.cluster_rules import lab_host_gaps
from gpuop.judgment.driver_rules import driver_gaps
from gpuop.judgment.entry import node_entry
from gpuop.judgment.gaps import gap
from gpuop.judgment.node_rules import DRIVER, node_bound_findings
from gpuop.judgment.objects import of_kind
from gpuop.judgment.runtime_rules import runtime_findings, unread_gaps
from gpuop.judgment.view import RUNTIME
from gpuop.judgment.viewtype import View


def findings(
    view: View,
    objects: list,
    node_name: str = "",
    gpu_handler: str = "nvidia",
    events: list | None = None,
    gpu_driver: str = DRIVER,
) -> list:
    """Every gap of one runtime: its node's NVIDIA driver's (``driver_gaps``, where the view read
    it), its own (``runtime_findings``), and, where it serves a node of the cluster
    (``node_name``), those joined with that node's objects.

    + view: the runtime's view (``gpuop.judgment.view``: ``lab_view``, ``node_view`` or ``api_view``)
    + objects: the cluster's Nodes, RuntimeClasses and Pods, plain JSON as the API gives them
    + node_name: the Node this runtime serves; empty: none (a lab host whose nodes are kwok's)
    + gpu_handler: the runtime handler GPU Pods need
    + events: the node's Events, where they were read: a failing sandbox is then held against the
      kubelet's own word; None: not read
    + gpu_driver: the DRA driver whose allocated devices are GPUs

        findings(node_view(read), objects, "gpu-a")
        -> [{"kind": "restart-takes-cri-down", "subject": "containerd", ...}, {"kind": "sandbox-fails", ...}]
    """
    gaps = driver_gaps(view.get("driver"))
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == node_name), None)
    if node_name and node is None:
        gaps.append(
            gap(
                "no-node-object",
                node_name,
                ["scheduled"],
                f"no Node named {node_name} in the cluster: set node_name for this host",
            )
        )
    if view["daemon"] is None and view["loaded_from"] == "none":
        if view["kubelet_endpoint"]:
            where = f" on kubelet's endpoint {view['kubelet_endpoint']}"
        elif view["others"]:
            where = " on the default socket, and no kubelet runs to say which of its containerds serves"
        else:
            where = ""
        if view["unread"]:  # a daemon whose flags were not read may be the one
            return gaps + unread_gaps(view)
        return gaps + [
            gap(
                "no-containerd",
                node_name or RUNTIME,
                ["loaded"],
                f"no containerd runs{where}: no Pod can start on this node",
            )
        ]
    gaps += runtime_findings(view)
    if node is not None:
        gaps += node_bound_findings(node_name, node, view, objects, gpu_handler, events, gpu_driver)
    return gaps


def judge(
    view: View,
    objects: list,
    node_name: str = "",
    gpu_handler: str = "nvidia",
    gpu_driver: str = DRIVER,
    lab_host: dict | None = None,
) -> dict:
    """The one door to the judgment of one runtime: its gaps (``findings``, the Events among
    ``objects`` held against its sandboxes) in its entry (``node_entry``). Every caller asks here:
    the lab audit, the node audit, the repair's plan and its audit after. ``lab_host``: the lab's
    time-slicing knobs, where the runtime is a lab host's and stands for every node of the cluster:
    the cluster's gaps around it follow its own (``cluster_rules.lab_host_gaps``), its warnings in
    ``warnings``.

        judge(node_view(read), objects, "gpu-a")["gaps"]
        -> [{"kind": "sandbox-refuses-loaded", "subject": "ml/train", ...}]
    """
    node = next((n for n in of_kind(objects, "Node") if n["metadata"]["name"] == node_name), None)
    gaps = findings(view, objects, node_name, gpu_handler, events=of_kind(objects, "Event"), gpu_driver=gpu_driver)
    entry = node_entry(view, gaps, node, objects, gpu_handler, gpu_driver)
    if lab_host is None:
        return entry
    around, warnings = lab_host_gaps(view["loaded"], objects, lab_host)  # its Pods at risk are its own gaps'
    return {**entry, "gaps": entry["gaps"] + around, "warnings": warnings}
