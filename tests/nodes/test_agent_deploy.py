"""The agent's deployment on the lab's API server: the kustomization applies as is (a server dry
run only once its Namespace exists: the API server checks a namespaced object's Namespace even
in a dry run), and its one boundary holds a Pod-bound token of the agent's ServiceAccount, under
the names a kustomize overlay (``namePrefix``) and the chart (a release ``edge`` in ``gpu-ops``)
give it, to the agent's own writes: every other write, through any door (a subresource, a field of
metadata or spec, an Event's old object), is refused with the policy's sentence, even where RBAC
is widened to let it reach the policy; with the policy's binding gone, RBAC alone keeps its Pod
and Event writes to their namespaces. The chart's uninstall hook may only take gpuop's marks off."""

import json
import os
import subprocess

import kubernetes
import pytest
import yaml

from gpuop.judgment.condition import GATE, PROBLEM, RESTART_UNSAFE
from tests.helpers.charts import render
from tests.helpers.kube import eventually, get, kubectl, token_kubeconfig

pytestmark = pytest.mark.lab  # drives the lab cluster: see pytest.ini

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KUSTOMIZATION = os.path.join(ROOT, "deploy", "agent")
NAMESPACE = "gpuop-system"
NODE, OTHER_NODE = "lab-node-1", "lab-node-2"  # kwok's: a Pod bound there runs no container
POLICY_SAYS = "ValidatingAdmissionPolicy '"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def pod_of(service_account: str, namespace: str, name: str) -> dict:
    """A Pod of ``service_account`` on NODE, whose bound token is the one its agent's Pod holds there."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": NODE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "gpuop-agent:0.1.0"}],
        },
    }


def as_token(token: str, path: str, *args) -> subprocess.CompletedProcess:
    """kubectl with only ``token`` for credentials, its kubeconfig left at ``path``."""
    token_kubeconfig(token, path)
    return subprocess.run(["kubectl", "--kubeconfig", path, *args], capture_output=True, text=True, timeout=60)


def written_as(path: str, call) -> str:
    """``call(api)`` with the kubeconfig at ``path``: what the API server refused it with, or ""
    where it took it."""
    api = kubernetes.config.new_client_from_config(config_file=path)
    try:
        call(api)
    except kubernetes.client.exceptions.ApiException as e:
        return json.loads(e.body or "{}").get("message") or str(e)
    finally:
        api.close()
    return ""


def core(call):
    return lambda api: call(kubernetes.client.CoreV1Api(api))


def without_gpuop(node: str):
    """gpuop's conditions and label taken off ``node`` (a test's, or one a policy not yet in force let by)."""
    found = get(f"node/{node}")
    removed = [
        {"op": "remove", "path": f"/status/conditions/{i}"}
        for i, c in reversed(list(enumerate(found["status"].get("conditions") or [])))
        if c["type"].startswith("gpuop.io/")
    ]
    if removed:
        kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(removed))
    kubectl("label", "node", node, f"{GATE}-", "gpuop.io/other-", check=False)


def test_the_kustomization_applies_and_a_rerun_changes_nothing():
    applied = kubectl("apply", "-k", KUSTOMIZATION)  # its DaemonSet selects GPU nodes: none here
    try:
        assert sorted(line for line in applied.splitlines() if line) == sorted(
            [
                "namespace/gpuop-system created",
                "serviceaccount/gpuop-agent created",
                "role.rbac.authorization.k8s.io/gpuop-agent created",
                "role.rbac.authorization.k8s.io/gpuop-agent-events created",
                "clusterrole.rbac.authorization.k8s.io/gpuop-agent created",
                "rolebinding.rbac.authorization.k8s.io/gpuop-agent created",
                "rolebinding.rbac.authorization.k8s.io/gpuop-agent-events created",
                "clusterrolebinding.rbac.authorization.k8s.io/gpuop-agent created",
                "daemonset.apps/gpuop-agent created",
                "validatingadmissionpolicy.admissionregistration.k8s.io/gpuop-agent-own-node created",
                "validatingadmissionpolicybinding.admissionregistration.k8s.io/gpuop-agent-own-node created",
            ]
        ), applied
        assert get("role/gpuop-agent-events", "default")["rules"] == [
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}
        ]
        again = kubectl("apply", "--dry-run=server", "-k", KUSTOMIZATION)  # what a user's rerun would do: nothing
        assert "daemonset.apps/gpuop-agent unchanged (server dry run)" in again, again
        assert get("daemonset/gpuop-agent", NAMESPACE)["status"].get("desiredNumberScheduled", 0) == 0
    finally:
        kubectl("delete", "-k", KUSTOMIZATION, "--ignore-not-found", "--timeout=120s")


class Install:
    """One install of the agent under its names: its agent's Pod on NODE and the kubeconfig of that
    Pod's bound token."""

    def __init__(self, name: str, service_account: str, namespace: str, binding: str):
        self.name, self.service_account, self.namespace, self.binding = name, service_account, namespace, binding
        self.pod, self.other_pod, self.path = f"{name}-agent", f"{name}-other", ""

    def token(self, root) -> str:
        for pod in (self.pod, self.other_pod):
            kubectl("apply", "-f", "-", stdin=json.dumps(pod_of(self.service_account, self.namespace, pod)))
        token = kubectl(
            "create",
            "token",
            self.service_account,
            "-n",
            self.namespace,
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            self.pod,
        ).strip()
        self.path = str(root / f"{self.name}.kubeconfig")
        who = json.loads(as_token(token, self.path, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert who["extra"]["authentication.kubernetes.io/node-name"] == [NODE], who
        return token


INSTALLS = {
    "kustomize overlay": Install("overlay", "lab-gpuop-agent", NAMESPACE, "lab-gpuop-agent-own-node"),
    "chart": Install("chart", "edge-gpuop-agent", "gpu-ops", "edge-gpuop-agent-own-node"),
}


@pytest.fixture(scope="module", params=list(INSTALLS))
def install(request, tmp_path_factory):
    """One install at a time (each policy holds every agent's token: two side by side would hide
    a hole in one): the kustomization under an overlay's namePrefix (lab-), or the chart as
    release edge in gpu-ops; its agent's Pod on NODE with its token."""
    root = tmp_path_factory.mktemp("install")
    found = INSTALLS[request.param]
    if request.param == "chart":
        text = render("edge", "gpu-ops")
        kubectl("create", "namespace", "gpu-ops")
        kubectl("apply", "-f", "-", stdin=text)
        undo = [("delete", "-f", "-", "--wait=false"), ("delete", "namespace", "gpu-ops", "--wait=false")]
    else:
        overlay = root / "overlay"
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump({"resources": [os.path.relpath(KUSTOMIZATION, overlay)], "namePrefix": "lab-"})
        )
        kubectl("apply", "-k", str(overlay))
        text, undo = None, [("delete", "-k", str(overlay))]
    try:
        found.token(root)
        eventually(  # a new policy takes a moment to be in force: asked in a server dry run until it is
            f"{found.binding} in force",
            lambda: written_as(
                found.path,
                core(lambda c: c.patch_node(OTHER_NODE, {"metadata": {"labels": {GATE: "true"}}}, dry_run="All")),
            ),
            timeout=30,
        )
        yield found
    finally:
        for args in undo:
            kubectl(*args, "--ignore-not-found", stdin=text, check=False)
        for node in (NODE, OTHER_NODE):
            without_gpuop(node)
        kubectl("delete", "events", "-n", "default", "--field-selector", "source=gpuop-agent", "--ignore-not-found")


def own_event(node: str = NODE, namespace: str = "default", source: dict | None = None) -> dict:
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


def test_its_token_makes_its_own_writes(install):
    """The gate's label on its own Node and Pod, its two conditions, its own Event created and counted."""
    made = []
    label, lift = {"metadata": {"labels": {GATE: "true"}}}, {"metadata": {"labels": {GATE: None}}}
    problem = {"type": PROBLEM, "status": "False", "reason": "NoGap", "message": "t"}
    restart = {"type": RESTART_UNSAFE, "status": "True", "reason": "RestartRefusesStart", "message": "t"}
    try:
        for what, call in {
            "its Node's gate": core(lambda c: c.patch_node(NODE, label)),
            "its Pod's gate": core(lambda c: c.patch_namespaced_pod(install.pod, install.namespace, label)),
            "its conditions": core(lambda c: c.patch_node_status(NODE, {"status": {"conditions": [problem, restart]}})),
            "its Event": core(lambda c: made.append(c.create_namespaced_event("default", own_event()).metadata.name)),
            "its Event counted": core(lambda c: c.patch_namespaced_event(made[0], "default", {"count": 2})),
            "its Node's gate lifted": core(lambda c: c.patch_node(NODE, lift)),
        }.items():
            assert written_as(install.path, call) == "", what
        assert get(f"pod/{install.pod}", install.namespace)["metadata"]["labels"][GATE] == "true"
        assert {c["type"] for c in get(f"node/{NODE}")["status"]["conditions"]} >= {PROBLEM, RESTART_UNSAFE}
    finally:
        without_gpuop(NODE)


WIDE = {  # RBAC widened past what the install grants, so that each write below reaches the policy
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": "gpuop-test-wide"},
    "rules": [
        {"apiGroups": [""], "resources": ["pods", "nodes", "events", "configmaps"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods/status", "pods/eviction", "nodes/status"], "verbs": ["*"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
    ],
}


def refusals(install: Install, kubelet_event: str) -> dict:
    """Each write the agent's token must not make: (its call, the words of the policy's refusal)."""
    label = {"metadata": {"labels": {GATE: "true"}}}
    bound_node = "the gpuop agent may change only the Node its token is bound to"
    bound_pod = "the gpuop agent may change only the Pod its token is bound to"
    only_gate = "the gpuop agent may change only the label gpuop.io/restart-unsafe"
    only_conditions = "the gpuop agent may change only its own conditions"
    own_events = "the gpuop agent may write only its own Events"
    ns, pod = install.namespace, install.pod

    def node_status(status: dict, meta: dict | None = None):
        return core(lambda c: c.patch_node_status(NODE, {"status": status, **({"metadata": meta} if meta else {})}))

    def event(e):
        return core(lambda c: c.create_namespaced_event(e["metadata"]["namespace"], e))

    owner = {"apiVersion": "v1", "kind": "Node", "name": OTHER_NODE, "uid": "6f8b1c2e-0000-4000-8000-000000000000"}
    return {
        "another Node's label": (core(lambda c: c.patch_node(OTHER_NODE, label)), bound_node),
        "another Node's conditions": (
            core(lambda c: c.patch_node_status(OTHER_NODE, {"status": {"conditions": [{"type": PROBLEM}]}})),
            bound_node,
        ),
        "another Pod's label": (core(lambda c: c.patch_namespaced_pod(install.other_pod, ns, label)), bound_pod),
        "another label": (
            core(lambda c: c.patch_node(NODE, {"metadata": {"labels": {"gpuop.io/other": "x"}}})),
            only_gate,
        ),
        "its gate with another value": (
            core(lambda c: c.patch_namespaced_pod(pod, ns, {"metadata": {"labels": {GATE: "no"}}})),
            only_gate,
        ),
        "an annotation": (core(lambda c: c.patch_node(NODE, {"metadata": {"annotations": {"a": "b"}}})), only_gate),
        "a finalizer": (core(lambda c: c.patch_node(NODE, {"metadata": {"finalizers": ["gpuop.io/hold"]}})), only_gate),
        "an owner": (
            core(lambda c: c.patch_namespaced_pod(pod, ns, {"metadata": {"ownerReferences": [owner]}})),
            only_gate,
        ),
        "its Node's spec": (core(lambda c: c.patch_node(NODE, {"spec": {"unschedulable": True}})), only_gate),
        "its Pod's spec": (
            core(lambda c: c.patch_namespaced_pod(pod, ns, {"spec": {"activeDeadlineSeconds": 5}})),
            only_gate,
        ),
        "its Ready condition": (node_status({"conditions": [{"type": "Ready", "status": "False"}]}), only_conditions),
        "its capacity": (node_status({"capacity": {"nvidia.com/gpu": "64"}}), only_conditions),
        "another gpuop.io condition": (node_status({"conditions": [{"type": "gpuop.io/Other"}]}), only_conditions),
        "a label through its status": (node_status({}, {"labels": {"gpuop.io/other": "x"}}), only_conditions),
        "the gate through its status": (node_status({}, {"labels": {GATE: "true"}}), only_conditions),
        "an annotation through its status": (node_status({}, {"annotations": {"a": "b"}}), only_conditions),
        "a finalizer through its status": (node_status({}, {"finalizers": ["gpuop.io/hold"]}), only_conditions),
        "an Event about another Node": (event(own_event(OTHER_NODE)), own_events),
        "an Event in the kubelet's name": (event(own_event(source={"component": "kubelet", "host": NODE})), own_events),
        "an Event from another host": (
            event(own_event(source={"component": "gpuop-agent", "host": OTHER_NODE})),
            own_events,
        ),
        "an Event outside default": (event(own_event(namespace=ns)), own_events),
        "the kubelet's Event counted": (
            core(lambda c: c.patch_namespaced_event(kubelet_event, "default", {"count": 9})),
            own_events,
        ),
        "a Pod made": (
            core(lambda c: c.create_namespaced_pod(ns, pod_of(install.service_account, ns, f"{install.name}-new"))),
            "the gpuop agent may not CREATE pods: ",
        ),
        "its Pod deleted": (core(lambda c: c.delete_namespaced_pod(pod, ns)), "the gpuop agent may not DELETE pods: "),
        "an eviction": (
            core(
                lambda c: c.create_namespaced_pod_eviction(
                    install.other_pod, ns, {"metadata": {"name": install.other_pod, "namespace": ns}}
                )
            ),
            "the gpuop agent may not CREATE pods/eviction: ",
        ),
        "its Pod's status": (
            core(lambda c: c.patch_namespaced_pod_status(pod, ns, {"status": {"message": "x"}})),
            "the gpuop agent may not UPDATE pods/status: ",
        ),
        "its Node deleted": (core(lambda c: c.delete_node(NODE)), "the gpuop agent may not DELETE nodes: "),
        "an Event deleted": (
            core(lambda c: c.delete_namespaced_event(kubelet_event, "default")),
            "the gpuop agent may not DELETE events: ",
        ),
        "an events.k8s.io Event": (
            lambda api: kubernetes.client.EventsV1Api(api).create_namespaced_event(
                "default",
                {
                    "metadata": {"generateName": "x-", "namespace": "default"},
                    "eventTime": "2026-12-07T00:00:00.000000Z",
                    "reportingController": "gpuop-agent",
                    "reportingInstance": NODE,
                    "action": "Judged",
                    "reason": "SandboxFails",
                    "type": "Warning",
                    "regarding": {"kind": "Node", "name": NODE},
                },
            ),
            "the gpuop agent may not CREATE events.events.k8s.io: ",
        ),
        "a ConfigMap": (
            core(lambda c: c.create_namespaced_config_map(ns, {"metadata": {"name": "x"}})),
            "the gpuop agent may not CREATE configmaps: ",
        ),
    }


def test_every_other_write_is_refused_by_the_policy_even_where_rbac_would_let_it(install):
    wide = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "gpuop-test-wide"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuop-test-wide"},
        "subjects": [{"kind": "ServiceAccount", "name": install.service_account, "namespace": install.namespace}],
    }
    kubelet_event = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config()).create_namespaced_event(
        "default", own_event(source={"component": "kubelet", "host": NODE})
    )
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [WIDE, wide]}))
    try:
        said = {}
        for what, (call, words) in refusals(install, kubelet_event.metadata.name).items():
            said[what] = eventually(  # RBAC's widening reaches the authorizer's cache within a moment
                f"{what} refused by the policy",
                lambda call=call: (lambda s: s if POLICY_SAYS in s else "")(written_as(install.path, call)),
                timeout=10,
            )
            assert words in said[what], (what, said[what])
        assert get(f"node/{NODE}")["metadata"].get("labels", {}).get("gpuop.io/other") is None
    finally:
        kubectl("delete", "clusterrolebinding,clusterrole", "gpuop-test-wide", "--ignore-not-found")
        kubectl("delete", "event", "-n", "default", kubelet_event.metadata.name, "--ignore-not-found")
        without_gpuop(NODE)


def test_with_the_policy_unbound_rbac_alone_keeps_its_pod_and_event_writes_to_their_namespaces(install):
    """Where the policy is not in force (a cluster before 1.30, a failed apply), RBAC alone: a Pod
    patched only in its own namespace, an Event created only in default."""
    saved = get(f"validatingadmissionpolicybinding/{install.binding}")
    kubectl("delete", "validatingadmissionpolicybinding", install.binding)
    other = pod_of("default", "default", "gpuop-test-bystander")
    kubectl("apply", "-f", "-", stdin=json.dumps(other))
    try:
        label = {"metadata": {"labels": {"x": "y"}}}
        eventually(  # a write RBAC lets and the policy refuses: taken once the policy is out of force
            "the policy out of force",
            lambda: (
                written_as(install.path, core(lambda c: c.patch_namespaced_pod(install.pod, install.namespace, label)))
                == ""
            ),
            timeout=30,
        )
        refused = written_as(
            install.path, core(lambda c: c.patch_namespaced_pod(other["metadata"]["name"], "default", label))
        )
        assert 'cannot patch resource "pods" in API group "" in the namespace "default"' in refused, refused
        said = written_as(
            install.path,
            core(lambda c: c.create_namespaced_event(install.namespace, own_event(namespace=install.namespace))),
        )
        assert f'cannot create resource "events" in API group "" in the namespace "{install.namespace}"' in said, said
    finally:
        kubectl(
            "delete",
            "pod",
            "-n",
            "default",
            "gpuop-test-bystander",
            "--ignore-not-found",
            "--grace-period=0",
            "--force",
        )
        kept = {k: saved[k] for k in ("apiVersion", "kind", "spec")}
        kubectl("apply", "-f", "-", stdin=json.dumps({**kept, "metadata": {"name": install.binding}}))
    eventually(
        "the policy in force again",
        lambda: written_as(
            install.path,
            core(lambda c: c.patch_node(OTHER_NODE, {"metadata": {"labels": {GATE: "true"}}}, dry_run="All")),
        ),
        timeout=30,
    )


def test_the_uninstall_hook_may_only_take_gpuop_s_marks_off(tmp_path):
    """The chart's pre-delete hook's identity (its ServiceAccount and ClusterRole, rendered with the
    hooks) under the chart's policy for it: it takes the gate's label and gpuop's conditions off a
    Node; it may not put a label on, change another condition, or lift another label."""
    rendered = [d for d in yaml.safe_load_all(render("hook", "gpu-hook", hooks=True)) if d]
    hook = [
        d
        for d in rendered
        if d["metadata"]["name"] == "hook-gpuop-agent-forget"
        and d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", *POLICY_KINDS)
    ]
    assert sorted(d["kind"] for d in hook) == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", *POLICY_KINDS]
    )
    objects = json.dumps({"apiVersion": "v1", "kind": "List", "items": hook})
    kubectl("create", "namespace", "gpu-hook")
    kubectl("apply", "-f", "-", stdin=objects)
    path = str(tmp_path / "hook.kubeconfig")
    as_token(kubectl("create", "token", "hook-gpuop-agent-forget", "-n", "gpu-hook").strip(), path, "auth", "whoami")
    problem = {"type": PROBLEM, "status": "True", "reason": "SandboxFails", "message": "t"}
    kubectl("patch", "node", NODE, "--subresource=status", "-p", json.dumps({"status": {"conditions": [problem]}}))
    kubectl("label", "node", NODE, f"{GATE}=true", "gpuop.io/other=x", "--overwrite")
    words = "the gpuop uninstall hook may only take gpuop's conditions and label off a Node"
    try:
        eventually(
            "the hook's identity held by the policy",
            lambda: (
                words
                in written_as(
                    path, core(lambda c: c.patch_node(OTHER_NODE, {"metadata": {"labels": {"y": "z"}}}, dry_run="All"))
                )
            ),
            timeout=30,
        )
        for what, call in {
            "a label put on": core(lambda c: c.patch_node(NODE, {"metadata": {"labels": {"y": "z"}}})),
            "another label lifted": core(
                lambda c: c.patch_node(NODE, {"metadata": {"labels": {"gpuop.io/other": None}}})
            ),
            "the Ready condition": core(
                lambda c: c.patch_node_status(NODE, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
            ),
        }.items():
            assert words in written_as(path, call), what
        gone = {"status": {"conditions": [{"type": PROBLEM, "$patch": "delete"}]}}
        assert written_as(path, core(lambda c: c.patch_node_status(NODE, gone))) == ""
        assert written_as(path, core(lambda c: c.patch_node(NODE, {"metadata": {"labels": {GATE: None}}}))) == ""
        node = get(f"node/{NODE}")
        assert GATE not in node["metadata"]["labels"] and node["metadata"]["labels"]["gpuop.io/other"] == "x"
        assert not [c for c in node["status"]["conditions"] if c["type"] == PROBLEM]
    finally:
        kubectl("delete", "-f", "-", "--ignore-not-found", stdin=objects)
        kubectl("delete", "namespace", "gpu-hook", "--ignore-not-found", "--wait=false")
        without_gpuop(NODE)
