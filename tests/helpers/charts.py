"""The agent's chart and alerts as the lab tries them: Helm, promtool and kube-state-metrics, each
built by the lab from its Go module (lab/build.sh), and the chart rendered into objects.

    objects(render("gpuop-agent", "gpuop-system"))   # {("DaemonSet", "gpuop-agent"): {...}, ...}
"""

import contextlib
import os
import re
import subprocess
import tempfile
import urllib.request

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.kube import eventually
from tests.helpers.proc import run
from tests.helpers.ssh import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(ROOT, "deploy", "helm", "gpuop-agent")
KUSTOMIZATION = os.path.join(ROOT, "deploy", "agent")
RULES = os.path.join(CHART, "rules", "gpuop-agent.rules.yaml")
RULE_TESTS = os.path.join(ROOT, "tests", "alerts", "gpuop-agent.rules.test.yaml")
# The labels Helm's charts add to an object, beside the kustomization's own
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)


def built(component: str, name: str) -> str:
    """The lab's binary ``name`` of ``component`` (lab/build.sh: built once, then cached)."""
    folder = run([os.path.join(ROOT, "lab", "build.sh"), component], timeout_s=1800, check=True).stdout.strip()
    return os.path.join(folder, name)


def helm(*args, check=True, timeout_s=300, env=None):
    return run([built("helm", "helm"), *args], timeout_s=timeout_s, check=check, env=env)


def promtool(*args, check=False):
    return run([built("promtool", "promtool"), *args], timeout_s=120, check=check)


def render(release: str, namespace: str, *values, hooks=False) -> str:
    """``helm template`` of the chart as ``release`` in ``namespace``, with ``values`` (``--set``
    words), its hooks left out unless asked for."""
    hooks_flag = [] if hooks else ["--no-hooks"]
    return helm("template", release, CHART, "--namespace", namespace, *values, *hooks_flag).stdout


def objects(text: str) -> dict:
    """Each object of a multi-document YAML by (kind, name)."""
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def rules_test(tests: list) -> str:
    """A promtool unit-test file over the chart's rules, holding ``tests``; its path."""
    f = tempfile.NamedTemporaryFile("w", suffix=".test.yaml", delete=False, dir="/tmp")
    with f:
        yaml.safe_dump({"rule_files": [RULES], "evaluation_interval": "1m", "tests": tests}, f)
    return f.name


@contextlib.contextmanager
def kube_state_metrics(kubeconfig: str, root: str):
    """kube-state-metrics (lab/build.sh kube-state-metrics) on the cluster of ``kubeconfig``, its
    Nodes only, on a free loopback port; yields a function that scrapes its ``/metrics``."""
    port, telemetry = free_port(), free_port()
    log = open(os.path.join(root, "kube-state-metrics.log"), "w")
    ksm = subprocess.Popen(
        [
            built("kube-state-metrics", "kube-state-metrics"),
            f"--kubeconfig={kubeconfig}",
            "--resources=nodes",
            "--host=127.0.0.1",
            f"--port={port}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={telemetry}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return answer.read().decode()

    try:
        eventually("kube-state-metrics to answer", lambda: _answers(scrape), timeout=60)
        yield scrape
    finally:
        ksm.terminate()
        ksm.wait(30)
        log.close()


def _answers(scrape) -> bool:
    try:
        return "kube_node_info" in scrape()
    except OSError:
        return False


def node_conditions(text: str, node: str) -> list:
    """The series ``kube_node_status_condition`` of gpuop's conditions on ``node`` in a scrape,
    each as (labels, value)."""
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kube_node_status_condition"
        and s.labels.get("node") == node
        and s.labels.get("condition", "").startswith("gpuop.io/")
    ]


def alerts_on(series: list, expected: dict, eval_time: str = "10m") -> subprocess.CompletedProcess:
    """promtool's test of the chart's rules, ``series`` (as ``node_conditions`` gives them) held
    steady from time 0, expecting at ``eval_time`` exactly ``expected``: alert name -> the labels of
    each alert it fires (an empty list: it fires none)."""
    lines = [
        {
            "series": "kube_node_status_condition{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
            "values": f"{value:g}x20",
        }
        for labels, value in series
    ]
    checks = [
        {
            "eval_time": eval_time,
            "alertname": name,
            "exp_alerts": [{"exp_labels": labels, "exp_annotations": annotations(name, labels)} for labels in fired],
        }
        for name, fired in expected.items()
    ]
    path = rules_test([{"interval": "1m", "input_series": lines, "alert_rule_test": checks}])
    try:
        return promtool("test", "rules", path)
    finally:
        os.remove(path)


def annotations(alert: str, labels: dict) -> dict:
    """The annotations the chart's rule ``alert`` gives an alert of ``labels`` (its ``{{ $labels.X }}``
    filled in)."""
    with open(RULES) as f:
        rule = next(r for g in yaml.safe_load(f)["groups"] for r in g["rules"] if r.get("alert") == alert)
    return {
        key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
        for key, text in rule.get("annotations", {}).items()
    }
