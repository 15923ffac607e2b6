"""Facts about the live Kubernetes cluster the target's kubectl reaches."""

import json
import shlex

from pyinfra.api import FactBase

REQUEST_TIMEOUT_S = 10  # each request kubectl makes to the API server
KUBECTL_DEADLINE_S = 30  # a whole kubectl call (discovery and retries included), unless it waits
# Go's collector off until the heap nears 256 MiB: a kubectl call lives a fraction of a second,
# and collecting during its start-up cost a fifth of it (the batched read's get: 0.14 s -> 0.115 s).
KUBECTL_GO_ENV = ("GOGC=off", "GOMEMLIMIT=256MiB")


def kubectl(context: str, *args, deadline_s: int = KUBECTL_DEADLINE_S) -> str:
    """A kubectl command line, pinned to a kubeconfig context when one is given, that cannot
    outlast its deadline: each request ends after ``REQUEST_TIMEOUT_S``, the whole call after
    ``deadline_s`` (it exits 124 then).

        kubectl("kwok-gpuop-lab", "get", "nodes")
        -> "GOGC=off GOMEMLIMIT=256MiB timeout -k 2 30 kubectl --context kwok-gpuop-lab --request-timeout=10s get nodes"
    """
    pinned = ("--context", context) if context else ()
    return shlex.join(
        (
            *KUBECTL_GO_ENV,
            "timeout",
            "-k",
            "2",
            str(deadline_s),
            "kubectl",
            *pinned,
            f"--request-timeout={REQUEST_TIMEOUT_S}s",
            *args,
        )
    )


class ClusterUnanswered(Exception):
    """The cluster did not answer a read (see ``KubeObjects``): kubectl's own words."""


UNANSWERED = "gpuop-cluster-unanswered:"


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

    With ``unanswered_raises=True`` a cluster that does not answer raises ``ClusterUnanswered``
    with kubectl's words instead of failing the host: a wait reports an API server down for a
    while and outlasts it, or names it when it gives up; a preflight says why a host is not ready.
    """

    @staticmethod
    def default():
        return []

    def command(self, resources, namespace=None, context="", all_namespaces=False, unanswered_raises=False):
        args = ["get", *([resources] if isinstance(resources, str) else resources)]
        args += ["--namespace", namespace] if namespace else []
        args += ["--all-namespaces"] if all_namespaces else []
        if not unanswered_raises:
            return kubectl(context, *args, "--output", "json", "--ignore-not-found")
        get = kubectl(context, *args, "--output", "json", "--ignore-not-found")
        # stdout (the JSON) passes through fd 3; stderr is kept to report a failure in words
        late = f"kubectl gave no answer within {KUBECTL_DEADLINE_S}s"
        return (
            f"{{ err=$({get} 2>&1 >&3); }} 3>&1 || {{ rc=$?; "
            f'case $rc in 124|137) err="{late}${{err:+ (it said: $err)}}";; esac; '
            f"printf '{UNANSWERED} %s\\n' \"${{err:-kubectl exited $rc}}\"; }}"
        )

    def process(self, output):
        for at, line in enumerate(output):
            if line.startswith(UNANSWERED):
                lines = [line.removeprefix(UNANSWERED), *output[at + 1 :]]
                # kubectl may say the same line more than once (it retries discovery)
                raise ClusterUnanswered(" ".join(dict.fromkeys(" ".join(x.split()) for x in lines if x.strip())))
        doc = json.loads("\n".join(output))
        return doc["items"] if "items" in doc else [doc]


class ServerAnswer(FactBase):
    """
    What the API server answers to applying a manifest file, asked with server-side dry runs (so
    nothing changes). When it refuses the update, it is asked to create the same objects anew:
    "already exists" means they are valid as written, so what it refused is a change of a field
    that cannot change in place (a RuntimeClass's handler, a DaemonSet's selector, a Pod's spec,
    an immutable ConfigMap's data), and only a recreation converges.

    .. code:: python

        host.get_fact(ServerAnswer, path="/root/gpuop/k8s/runtimeclass.yaml", context="kwok-gpuop-lab")
        {"refused": 'The RuntimeClass "nvidia" is invalid: handler: ... field is immutable',
         "recreate": True}
    """

    @staticmethod
    def default():
        return {"refused": "", "recreate": False}

    def command(self, path, context=""):
        def dry_run(verb):
            return kubectl(context, verb, "--dry-run=server", "--filename", path, "--output", "name")

        return (
            f"if out=$({dry_run('apply')} 2>&1); then echo update-accepted; "
            f"else printf '%s\\n' \"$out\" | sed 's/^/refused /'; "
            f"{dry_run('create')} 2>&1 | sed 's/^/create /'; fi"
        )

    def process(self, output):
        if output[0] == "update-accepted":
            return self.default()
        # the server's first line names the object and the field (a Pod's goes on with a diff of
        # its spec); kubectl's own warnings come before it
        said = [line.removeprefix("refused ") for line in output if line.startswith("refused ")]
        refused = next((line for line in said if not line.startswith("Warning:")), "")
        created = [line for line in output if line.startswith("create ")]
        return {"refused": refused, "recreate": any("(AlreadyExists)" in line for line in created)}
