"""The shipped alerts (deploy/helm/devicectl/files/alerts.yaml, linked from deploy/prometheus/):
`promtool check rules` accepts them, every rule has a `promtool test rules` unit test that sees it
quiet and firing (tests/deploy/alerts_test.yaml), and every metric a rule reads is one the code
exports. Debian's `prometheus` package provides promtool (CI installs it; without it, a skip)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_prometheus import PROMTOOL, _require

ROOT = Path(__file__).parents[2]
RULES = ROOT / "deploy" / "prometheus" / "devicectl-alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")


def rules() -> list[dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _promtool(*args: str) -> str:
    done = subprocess.run(
        [_require(PROMTOOL, "promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_checks_the_rules() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_promtool_unit_tests_pass_and_cover_every_rule() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    assert [(UNIT_TESTS.parent / f).resolve() for f in tests["rule_files"]] == [RULES.resolve()]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {str(rule["alert"]) for rule in rules()}
    assert len(names) == 9
    assert fired == names, "each rule is seen firing"
    assert quiet == names, "each rule is seen quiet (healthy, or inside its for:)"
    _promtool("test", "rules", str(UNIT_TESTS))


def test_every_metric_a_rule_reads_is_exported_by_the_code() -> None:
    source = "\n".join(
        p.read_text() for folder in ("controller", "plugins") for p in (ROOT / folder).rglob("*.py")
    )
    for rule in rules():
        for metric in re.findall(r"devicectl_\w+", str(rule["expr"])):
            name = metric.removesuffix("_total")
            assert f'"{name}"' in source, f"{rule['alert']}: no metric {name} in the code"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: str(r["alert"]))
def test_each_rule_says_what_and_how_bad(rule: dict[str, object]) -> None:
    labels = rule["labels"]
    annotations = rule["annotations"]
    assert isinstance(labels, dict) and labels["severity"] in ("critical", "warning")
    assert isinstance(annotations, dict) and annotations["summary"] and annotations["description"]
