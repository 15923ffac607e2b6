"""The agent's Helm chart (deploy/helm/gpuop-agent), built Helm (lab/build.sh helm) against the
lab's API server: it lints; its default values render the kustomization's objects (deploy/agent,
``kubectl kustomize``); every ``enabled`` value renders objects the API server takes (a server dry
run, prometheus-operator's CRDs installed); its PrometheusRule is its rules file less what
``defaultRules.disabled`` names, with ``additionalRules``; the admission policy follows the
release's namespace and ServiceAccount."""

import json
import os

import pytest
import yaml

from tests.helpers.charts import CHART, HELM_LABELS, KUSTOMIZATION, RULES, built, helm, objects, render
from tests.helpers.kube import kubectl

pytestmark = pytest.mark.lab

NAMESPACE = "gpuop-chart"  # not the kustomization's: the chart follows its release's


def without_helm_labels(found: dict) -> dict:
    """Objects with Helm's own labels off, and no namespace on a cluster-scoped one (kustomize sets
    it on kinds it does not know; the API server keeps none there)."""
    namespaced = {"ServiceAccount", "DaemonSet", "Service", "ServiceMonitor", "PrometheusRule", "Role", "RoleBinding"}
    for (kind, _), obj in found.items():
        labels = obj["metadata"].get("labels") or {}
        for key in HELM_LABELS:
            labels.pop(key, None)
        if kind not in namespaced:
            obj["metadata"].pop("namespace", None)
    return found


def test_the_chart_lints():
    linted = helm("lint", "--strict", CHART)
    assert "1 chart(s) linted, 0 chart(s) failed" in linted.stdout, linted.stdout


def test_default_values_render_the_kustomization_s_objects():
    """Every object of ``kubectl apply -k deploy/agent`` but its Namespace (``helm install
    --create-namespace`` makes a release's), the same field for field, Helm's labels apart."""
    chart = without_helm_labels(objects(render("gpuop-agent", "gpuop-system")))
    kustomized = without_helm_labels(objects(kubectl("kustomize", KUSTOMIZATION)))
    assert kustomized.pop(("Namespace", "gpuop-system"))
    # the uninstall hook's boundary: the chart's alone (a kustomize user runs --forget as themselves)
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert chart.pop((kind, "gpuop-agent-forget"))
    assert sorted(chart) == sorted(kustomized)
    for key, obj in chart.items():
        assert obj == kustomized[key], key


def test_the_agent_s_identity_and_its_rights_follow_the_release_s_namespace_and_service_account():
    """The policy names no ServiceAccount: the release's is bound to the role that grants the
    agent's identity, its Pods patched in the release's namespace, its Events in default."""
    found = objects(render("edge", "gpu-ops"))
    subject = [{"kind": "ServiceAccount", "name": "edge-gpuop-agent", "namespace": "gpu-ops"}]
    for kind, name in (
        ("ClusterRoleBinding", "edge-gpuop-agent"),
        ("RoleBinding", "edge-gpuop-agent"),
        ("RoleBinding", "edge-gpuop-agent-events"),
    ):
        assert found[(kind, name)]["subjects"] == subject, name
    assert found[("RoleBinding", "edge-gpuop-agent")]["metadata"]["namespace"] == "gpu-ops"
    assert found[("RoleBinding", "edge-gpuop-agent-events")]["metadata"]["namespace"] == "default"
    identity = {
        "apiGroups": ["gpuop.io"],
        "resources": ["identities"],
        "resourceNames": ["node-agent"],
        "verbs": ["be"],
    }
    assert identity in found[("ClusterRole", "edge-gpuop-agent")]["rules"]
    policy = found[("ValidatingAdmissionPolicy", "edge-gpuop-agent-own-node")]
    assert "name('node-agent').check('be')" in policy["spec"]["matchConditions"][0]["expression"]
    assert "edge" not in json.dumps(policy["spec"])
    assert found[("ValidatingAdmissionPolicyBinding", "edge-gpuop-agent-own-node")]["spec"]["policyName"] == (
        "edge-gpuop-agent-own-node"
    )
    assert found[("DaemonSet", "edge-gpuop-agent")]["spec"]["template"]["spec"]["serviceAccountName"] == (
        "edge-gpuop-agent"
    )


def test_the_prometheus_rule_is_the_rules_file_less_the_disabled_with_the_additional():
    extra = {"alert": "GPUNodeCordoned", "expr": "kube_node_spec_unschedulable == 1", "for": "1h"}
    found = objects(
        render(
            "gpuop-agent",
            NAMESPACE,
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.defaultRules.disabled={GPURuntimeAgentMissing}",
            "--set-json",
            f"metrics.prometheusRule.additionalRules=[{json.dumps(extra)}]",
        )
    )
    with open(RULES) as f:
        shipped = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    rules = found[("PrometheusRule", "gpuop-agent")]["spec"]["groups"][0]["rules"]
    assert rules == [r for r in shipped if r["alert"] != "GPURuntimeAgentMissing"] + [extra]
    assert len(shipped) == 6


def test_every_enabled_value_renders_objects_the_api_server_takes():
    """The ServiceMonitor and PrometheusRule on, with their CRDs from prometheus-operator's module,
    the hooks in: a server dry run of every object, each one named as created."""
    crds = built("crds", "")
    names = ("monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com_servicemonitors.yaml")
    for name in names:
        kubectl("apply", "--server-side", "-f", os.path.join(crds, name))
    try:
        for crd in ("prometheusrules", "servicemonitors"):
            kubectl("wait", "--for=condition=Established", f"crd/{crd}.monitoring.coreos.com", "--timeout=60s")
        kubectl("create", "namespace", NAMESPACE)
        text = render(
            "gpuop-agent",
            NAMESPACE,
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            hooks=True,
        )
        rendered = objects(text)
        assert {kind for kind, _ in rendered} >= {"ServiceMonitor", "PrometheusRule", "Service", "Job"}
        tried = kubectl("apply", "--dry-run=server", "-f", "-", stdin=text)
        said = sorted(line.split(" ")[0].split("/")[-1] for line in tried.strip().splitlines())
        assert all(line.endswith("created (server dry run)") for line in tried.strip().splitlines()), tried
        assert said == sorted(name for _, name in rendered), tried
    finally:
        for crd in ("prometheusrules", "servicemonitors"):
            kubectl("delete", "crd", f"{crd}.monitoring.coreos.com", "--ignore-not-found")
        kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
