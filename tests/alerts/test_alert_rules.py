"""The agent's alert rules (deploy/helm/gpuop-agent/rules) checked and unit-tested by promtool,
built from its module (lab/build.sh promtool): each alert fires when it should and not before
(tests/alerts/gpuop-agent.rules.test.yaml), and a rule changed makes those tests fail."""

import re

import yaml

from tests.helpers.charts import RULE_TESTS, RULES, promtool


def test_promtool_checks_the_rules_file():
    checked = promtool("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"SUCCESS: 6 rules found", checked.stdout), checked.stdout


def test_each_alert_fires_when_it_should_and_not_before():
    tested = promtool("test", "rules", RULE_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout, tested.stdout


def test_a_rule_made_quicker_fails_the_tests(tmp_path):
    """The tests bite: GPURuntimeProblem's 5 minutes made 1, its "not before" case fails."""
    with open(RULES) as f:
        text = f.read()
    assert "for: 5m" in text
    quicker = tmp_path / "quicker.rules.yaml"
    quicker.write_text(text.replace("for: 5m", "for: 1m", 1))
    with open(RULE_TESTS) as f:
        tests = yaml.safe_load(f)
    moved = tmp_path / "quicker.test.yaml"
    moved.write_text(yaml.safe_dump({**tests, "rule_files": [str(quicker)]}))
    tested = promtool("test", "rules", str(moved))
    assert tested.returncode != 0, tested.stdout
    assert "alertname: GPURuntimeProblem" in tested.stdout + tested.stderr, tested.stdout + tested.stderr
