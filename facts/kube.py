"""Facts about the live Kubernetes cluster the target's kubectl reaches."""

import json
import shlex

from pyinfra.api import FactBase


def kubectl(context: str, *args) -> str:
    """A kubectl command line, pinned to a kubeconfig context when one is given.

        kubectl("kwok-gpuop-lab", "get", "nodes") -> "kubectl --context kwok-gpuop-lab get nodes"
    """
    pinned = ("--context", context) if context else ()
    return shlex.join(("kubectl", *pinned, *args))


class KubeObjects(FactBase):
    """
    Live objects as kubectl returns them: a list of plain dicts to query with jmespath, empty
    when there is none. ``resources`` is what ``kubectl get`` takes: one argument
    (``"pods"``, ``"daemonsets,pods"``, ``"node/lab-node-0"``) or several ``kind/name`` ones,
    read in one round trip; in one namespace, the current one, or all of them.

    .. code:: python

        host.get_fact(KubeObjects, resources="pods", namespace="gpu-lab")
        [{"kind": "Pod", "metadata": {"name": "cuda-probe", ...}, "status": {...}}]
        host.get_fact(KubeObjects, resources=("namespace/gpu-lab", "serviceaccount/default"),
                      namespace="gpu-lab", context="kwok-gpuop-lab")
    """

    @staticmethod
    def default():
        return []

    def command(self, resources, namespace=None, context="", all_namespaces=False):
        args = ["get", *([resources] if isinstance(resources, str) else resources)]
        args += ["--namespace", namespace] if namespace else []
        args += ["--all-namespaces"] if all_namespaces else []
        return kubectl(context, *args, "--output", "json", "--ignore-not-found")

    def process(self, output):
        doc = json.loads("\n".join(output))
        return doc["items"] if "items" in doc else [doc]


class ClusterReach(FactBase):
    """
    Whether the target's kubectl reaches its cluster, and the nodes it sees there; never fails,
    so a preflight can say exactly why a host is not ready.

    .. code:: python

        host.get_fact(ClusterReach, context="kwok-gpuop-lab")
        {"ok": True, "nodes": ["lab-node-0", "lab-node-1", "lab-node-2"], "error": ""}
    """

    @staticmethod
    def default():
        return {"ok": False, "nodes": [], "error": "no answer"}

    def command(self, context=""):
        get = kubectl(context, "get", "nodes", "--request-timeout=10s",
                      "--output", "jsonpath={.items[*].metadata.name}")
        return f'out=$({get} 2>&1); echo "$?"; printf "%s\\n" "$out"'

    def process(self, output):
        ok = output[0].strip() == "0"
        rest = "\n".join(output[1:]).strip()
        return {"ok": ok, "nodes": rest.split() if ok else [], "error": "" if ok else rest}
