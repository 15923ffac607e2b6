"""The agent's deployment (``kubectl apply -k deploy/agent``) on the lab's API server: it applies
as is (a server dry run only once its Namespace exists: the API server checks a namespaced
object's Namespace even in a dry run), and its admission policy lets the agent's ServiceAccount change only the Node its
token is
bound to (the node of the Pod the token is bound to, in the token's user info)."""

import json
import os
import subprocess

import pytest

from tests.helpers.kube import eventually, get, kubectl

pytestmark = pytest.mark.beside  # drives a lab of its own, beside the lab's: see pytest.ini

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUSTOMIZATION = os.path.join(ROOT, "deploy", "agent")
NAMESPACE = "gpuop-system"
# A Pod of the agent's ServiceAccount on lab-node-1 (kwok's: it never runs a container), whose
# bound token is the one the agent's Pod would hold there.
AGENT_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "agent-on-lab-node-1", "namespace": NAMESPACE},
    "spec": {
        "serviceAccountName": "gpuop-agent",
        "nodeName": "lab-node-1",
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "agent", "image": "gpuop-agent:0.1.0"}],
    },
}


def as_token(token: str, path: str, *args) -> subprocess.CompletedProcess:
    """kubectl with only ``token`` for credentials (no client certificate beside it), against the
    current context's API server and CA."""
    raw = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    cluster = raw["clusters"][0]["cluster"]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "agent",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "agent", "context": {"cluster": "lab", "user": "agent"}}],
    }
    with open(path, "w") as f:
        json.dump(kubeconfig, f)
    return subprocess.run(["kubectl", "--kubeconfig", path, *args], capture_output=True, text=True, timeout=60)


def condition(status: str) -> str:
    return json.dumps(
        {
            "status": {
                "conditions": [
                    {"type": "gpuop.io/GPURuntimeProblem", "status": status, "reason": "NoGap", "message": "test"}
                ]
            }
        }
    )


def without_condition(node: str):
    """The agent's condition taken off ``node`` (a test's, or one a policy not yet in force let by)."""
    kubectl(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=json",
        "-p",
        json.dumps(
            [
                {"op": "remove", "path": f"/status/conditions/{i}"}
                for i, c in reversed(list(enumerate(get(f"node/{node}")["status"]["conditions"])))
                if c["type"] == "gpuop.io/GPURuntimeProblem"
            ]
        ),
        check=False,
    )


def test_the_kustomization_applies_and_a_token_may_change_only_its_own_node(tmp_path):
    without_condition("lab-node-2")
    applied = kubectl("apply", "-k", KUSTOMIZATION)  # its DaemonSet selects GPU nodes: none here
    try:
        assert sorted(line for line in applied.splitlines() if line) == sorted(
            [
                "namespace/gpuop-system created",
                "serviceaccount/gpuop-agent created",
                "clusterrole.rbac.authorization.k8s.io/gpuop-agent created",
                "clusterrolebinding.rbac.authorization.k8s.io/gpuop-agent created",
                "daemonset.apps/gpuop-agent created",
                "validatingadmissionpolicy.admissionregistration.k8s.io/gpuop-agent-own-node created",
                "validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuop-agent-own-node created",
            ]
        ), applied
        again = kubectl("apply", "--dry-run=server", "-k", KUSTOMIZATION)  # what a user's rerun would do: nothing
        assert "daemonset.apps/gpuop-agent unchanged (server dry run)" in again, again
        assert get("daemonset/gpuop-agent", NAMESPACE)["status"].get("desiredNumberScheduled", 0) == 0
        kubectl("apply", "-f", "-", stdin=json.dumps(AGENT_POD))
        token = kubectl(
            "create",
            "token",
            "gpuop-agent",
            "-n",
            NAMESPACE,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            AGENT_POD["metadata"]["name"],
        ).strip()
        path = str(tmp_path / "agent.kubeconfig")
        who = json.loads(as_token(token, path, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert who["extra"]["authentication.kubernetes.io/node-name"] == ["lab-node-1"], who

        def refused(*dry):  # a new policy takes a moment to be in force: asked in a server dry run until it is
            other = as_token(
                token,
                path,
                "patch",
                "node",
                "lab-node-2",
                "--subresource=status",
                "--type=strategic",
                "-p",
                condition("False"),
                *dry,
            )
            return other.returncode != 0 and other.stderr.strip()

        eventually("the policy to refuse another node's status", lambda: refused("--dry-run=server"), timeout=30)
        said = refused()
        assert (
            "ValidatingAdmissionPolicy 'gpuop-agent-own-node' with binding 'gpuop-agent-own-node' denied request: "
            "the gpuop agent may change only the Node its token is bound to" in said
        ), said
        own = as_token(
            token,
            path,
            "patch",
            "node",
            "lab-node-1",
            "--subresource=status",
            "--type=strategic",
            "-p",
            condition("False"),
        )
        assert own.returncode == 0, own.stderr
        assert any(c["type"] == "gpuop.io/GPURuntimeProblem" for c in get("node/lab-node-1")["status"]["conditions"])
        assert not any(
            c["type"] == "gpuop.io/GPURuntimeProblem" for c in get("node/lab-node-2")["status"]["conditions"]
        )
    finally:
        kubectl("delete", "-k", KUSTOMIZATION, "--ignore-not-found", "--timeout=120s")
        for name in ("lab-node-1", "lab-node-2"):
            without_condition(name)


def test_the_alert_rule_is_one_prometheus_operator_takes():
    """The example alert on the agent's condition, tried against the lab's API server with
    prometheus-operator's own PrometheusRule CRD installed (lab/build.sh crds)."""
    crd = os.path.join(
        subprocess.run(
            [os.path.join(ROOT, "lab", "build.sh"), "crds"], capture_output=True, text=True, check=True, timeout=300
        ).stdout.strip(),
        "monitoring.coreos.com_prometheusrules.yaml",
    )
    kubectl("apply", "--server-side", "-f", crd)
    try:
        kubectl("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com", "--timeout=60s")
        kubectl("create", "namespace", NAMESPACE)
        tried = kubectl(
            "apply", "--dry-run=server", "-f", os.path.join(KUSTOMIZATION, "examples", "prometheus-rule.yaml")
        )
        assert tried.strip() == "prometheusrule.monitoring.coreos.com/gpuop-agent created (server dry run)", tried
    finally:
        kubectl("delete", "crd", "prometheusrules.monitoring.coreos.com", "--ignore-not-found")
        kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
