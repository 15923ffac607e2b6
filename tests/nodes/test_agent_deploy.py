"""The agent's deployment (``kubectl apply -k deploy/agent``) on the lab's API server: it applies
as is (a server dry run only once its Namespace exists: the API server checks a namespaced
object's Namespace even in a dry run), and its admission policy lets the agent's ServiceAccount change only the Node its
token is
bound to (the node of the Pod the token is bound to, in the token's user info)."""

import json
import os
import subprocess

import kubernetes
import pytest

from tests.helpers.kube import eventually, get, kubectl

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

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


def agent_token() -> str:
    """A token of the agent's ServiceAccount bound to AGENT_POD, as its Pod would hold one."""
    return kubectl(
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


def patched_as(path: str, node: str, dry_run: str | None = None) -> str:
    """The agent's one write to ``node`` (a strategic merge patch of its status, with no read
    before it: the agent's role grants no get), made with the kubeconfig at ``path``; what the API
    server refused it with, or "" where it took it."""
    api = kubernetes.config.new_client_from_config(config_file=path)
    body = {
        "status": {
            "conditions": [{"type": "gpuop.io/GPURuntimeProblem", "status": "False", "reason": "NoGap", "message": "t"}]
        }
    }
    try:
        kubernetes.client.CoreV1Api(api).patch_node_status(
            node, body, **({"dry_run": dry_run} if dry_run else {}), _preload_content=False
        )
    except kubernetes.client.exceptions.ApiException as e:
        return json.loads(e.body or "{}").get("message") or str(e)
    finally:
        api.close()
    return ""


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
                if c["type"].startswith("gpuop.io/")
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
        token = agent_token()
        path = str(tmp_path / "agent.kubeconfig")
        who = json.loads(as_token(token, path, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert who["extra"]["authentication.kubernetes.io/node-name"] == ["lab-node-1"], who

        def refused(dry_run=None):  # a new policy takes a moment to be in force: asked in a server dry run until it is
            return patched_as(path, "lab-node-2", dry_run)

        eventually("the policy to refuse another node's status", lambda: refused("All"), timeout=30)
        said = refused()
        assert (
            "ValidatingAdmissionPolicy 'gpuop-agent-own-node' with binding 'gpuop-agent-own-node' denied request: "
            "the gpuop agent may change only the Node its token is bound to" in said
        ), said
        assert patched_as(path, "lab-node-1") == ""
        assert any(c["type"] == "gpuop.io/GPURuntimeProblem" for c in get("node/lab-node-1")["status"]["conditions"])
        assert not any(
            c["type"] == "gpuop.io/GPURuntimeProblem" for c in get("node/lab-node-2")["status"]["conditions"]
        )
    finally:
        kubectl("delete", "-k", KUSTOMIZATION, "--ignore-not-found", "--timeout=120s")
        for name in ("lab-node-1", "lab-node-2"):
            without_condition(name)


OTHER_POD = {**AGENT_POD, "metadata": {"name": "another-pod", "namespace": NAMESPACE}}
GATE = "gpuop.io/restart-unsafe"


def written_as(path: str, call) -> str:
    """``call(core)`` with the agent's kubeconfig at ``path``: what the API server refused it
    with, or "" where it took it."""
    api = kubernetes.config.new_client_from_config(config_file=path)
    try:
        call(kubernetes.client.CoreV1Api(api))
    except kubernetes.client.exceptions.ApiException as e:
        return json.loads(e.body or "{}").get("message") or str(e)
    finally:
        api.close()
    return ""


def test_the_agent_s_token_changes_only_gpuop_s_own_on_its_own_node_and_pod(tmp_path):
    """The restart gate's writes: its label on its own Node and its own Pod are taken; the label on
    another Node or Pod, another label, the Node's Ready condition or its capacity are refused."""
    applied = kubectl("apply", "-k", KUSTOMIZATION)
    try:
        assert "validatingadmissionpolicy.admissionregistration.k8s.io/gpuop-agent-own-node" in applied, applied
        for pod in (AGENT_POD, OTHER_POD):
            kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        token = agent_token()
        path = str(tmp_path / "agent.kubeconfig")
        as_token(token, path, "auth", "whoami")
        label = {"metadata": {"labels": {GATE: "true"}}}
        eventually(
            "the policy to refuse another node's label",
            lambda: written_as(path, lambda c: c.patch_node("lab-node-2", label, dry_run="All")),
            timeout=30,
        )
        own_pod = AGENT_POD["metadata"]["name"]
        assert written_as(path, lambda c: c.patch_node("lab-node-1", label)) == ""
        assert written_as(path, lambda c: c.patch_namespaced_pod(own_pod, NAMESPACE, label)) == ""
        assert get(f"pod/{own_pod}", NAMESPACE)["metadata"]["labels"][GATE] == "true"
        lift = {"metadata": {"labels": {GATE: None}}}
        assert written_as(path, lambda c: c.patch_node("lab-node-1", lift)) == ""
        refusals = {
            "another Node's label": (
                lambda c: c.patch_node("lab-node-2", label),
                "the gpuop agent may change only the Node its token is bound to",
            ),
            "another Pod's label": (
                lambda c: c.patch_namespaced_pod("another-pod", NAMESPACE, label),
                "the gpuop agent may change only the Pod its token is bound to",
            ),
            "another label": (
                lambda c: c.patch_node("lab-node-1", {"metadata": {"labels": {"gpuop.io/other": "x"}}}),
                "the gpuop agent may change only the label gpuop.io/restart-unsafe",
            ),
            "its gate label with another value": (
                lambda c: c.patch_namespaced_pod(own_pod, NAMESPACE, {"metadata": {"labels": {GATE: "no"}}}),
                "the gpuop agent may change only the label gpuop.io/restart-unsafe",
            ),
            "its Node's Ready condition": (
                lambda c: c.patch_node_status(
                    "lab-node-1", {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "x"}]}}
                ),
                "the gpuop agent may change only its own conditions",
            ),
            "its Node's capacity": (
                lambda c: c.patch_node_status("lab-node-1", {"status": {"capacity": {"nvidia.com/gpu": "64"}}}),
                "the gpuop agent may change only its own conditions",
            ),
            "another gpuop.io condition": (
                lambda c: c.patch_node_status(
                    "lab-node-1", {"status": {"conditions": [{"type": "gpuop.io/Other", "status": "True"}]}}
                ),
                "the gpuop agent may change only its own conditions",
            ),
        }
        for what, (call, words) in refusals.items():
            said = written_as(path, call)
            assert words in said, (what, said)
        restart = {"type": "gpuop.io/GPURuntimeRestartUnsafe", "status": "True", "reason": "RestartRefusesStart"}
        assert (
            written_as(path, lambda c: c.patch_node_status("lab-node-1", {"status": {"conditions": [restart]}})) == ""
        )
        assert (get("node/lab-node-2")["metadata"].get("labels") or {}).get(GATE) is None
    finally:
        kubectl("delete", "-k", KUSTOMIZATION, "--ignore-not-found", "--timeout=120s")
        kubectl("label", "node", "lab-node-1", f"{GATE}-", check=False)
        for name in ("lab-node-1", "lab-node-2"):
            without_condition(name)


def agent_event(node: str, namespace: str = "default", source: dict | None = None) -> dict:
    """An Event as the agent writes one (gpuop/agent/events.py), about ``node``."""
    return {
        "metadata": {"generateName": f"{node}.gpuop-test-", "namespace": namespace},
        # the API server itself holds an Event to its object's namespace ("" for a Node: default)
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"}
        | ({} if namespace == "default" else {"namespace": namespace}),
        "reason": "SandboxFails",
        "message": "GPURuntimeProblem True: a test's",
        "type": "Warning",
        "source": source or {"component": "gpuop-agent", "host": node},
    }


def test_the_agent_s_token_writes_only_its_own_events_about_its_own_node(tmp_path):
    """Its Event about its own Node, from its own source, in default, is taken and counted; one
    about another Node, in the kubelet's name (what the sandbox rule believes) or elsewhere than
    default is refused: a forged Event cannot move another node's verdict."""
    applied = kubectl("apply", "-k", KUSTOMIZATION)
    made = []
    try:
        assert "validatingadmissionpolicy.admissionregistration.k8s.io/gpuop-agent-own-node" in applied, applied
        kubectl("apply", "-f", "-", stdin=json.dumps(AGENT_POD))
        path = str(tmp_path / "agent.kubeconfig")
        as_token(agent_token(), path, "auth", "whoami")

        def create(event):
            return lambda c: made.append(c.create_namespaced_event(event["metadata"]["namespace"], event).metadata.name)

        eventually(
            "the policy to refuse an Event about another node",
            lambda: written_as(
                path, lambda c: c.create_namespaced_event("default", agent_event("lab-node-2"), dry_run="All")
            ),
            timeout=30,
        )
        assert written_as(path, create(agent_event("lab-node-1"))) == ""
        counted = {"count": 2}
        assert written_as(path, lambda c: c.patch_namespaced_event(made[-1], "default", counted)) == ""
        words = "the gpuop agent may write only its own Events"
        refusals = {
            "about another Node": agent_event("lab-node-2"),
            "in the kubelet's name": agent_event("lab-node-1", source={"component": "kubelet", "host": "lab-node-1"}),
            "from another host": agent_event("lab-node-1", source={"component": "gpuop-agent", "host": "lab-node-2"}),
            "elsewhere than default": agent_event("lab-node-1", namespace=NAMESPACE),
        }
        for what, event in refusals.items():
            said = written_as(path, create(event))
            assert words in said, (what, said)
        forged = {"source": {"component": "kubelet", "host": "lab-node-1"}}
        assert words in written_as(path, lambda c: c.patch_namespaced_event(made[0], "default", forged))
    finally:
        for name in made:
            kubectl("delete", "event", "-n", "default", name, "--ignore-not-found")
        kubectl("delete", "-k", KUSTOMIZATION, "--ignore-not-found", "--timeout=120s")
