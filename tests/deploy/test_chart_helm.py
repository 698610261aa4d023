"""The chart as Helm itself sees it (tests/deploy/_helm.py): `helm lint --strict` clean for every
values combination, values.schema.json refusing mistyped values, standard names (63 characters)
and labels with the chart's appVersion, and the operator's knobs: NetworkPolicy, ServiceMonitor
and PrometheusRule labels, placement, grace period, the SQLite update strategy."""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy._helm import ChartFailure, lint, render_chart, render_notes
from tests.deploy.test_chart_schemas import (
    COMBINATIONS,
    PLACEMENT,
    PROMETHEUS_RULE,
    SERVICE_MONITOR,
    VERSIONS,
    pod_spec,
)
from tests.deploy.test_deploy import CHART, DEPLOY, by_kind, container

METADATA = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION = METADATA["appVersion"]
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_helm_lint_strict_is_clean(name: str) -> None:
    assert lint(CHART, COMBINATIONS[name]) == []


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        ({"replica": 3}, "additional properties 'replica' not allowed"),  # replicas, misspelled
        ({"replicas": "3"}, "/replicas': got string, want integer"),
        ({"probes": {"type": "tcp"}}, "/probes/type': value must be one of 'grpc', 'http'"),
        ({"tls": {"enable": True}}, "additional properties 'enable' not allowed"),
        ({"database": {"engine": "mysql"}}, "/database/engine'"),
        ({"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled'"),
        ({"workers": -1}, "/workers'"),
        ({"shadow": "yes"}, "/shadow': got string, want boolean"),
    ],
)
def test_the_schema_refuses_mistyped_values(values: dict[str, Any], refusal: str) -> None:
    with pytest.raises(ChartFailure, match=re.escape(refusal)):
        render_chart(CHART, values)
    assert any(refusal in finding for finding in lint(CHART, values))


def test_every_value_is_in_the_schema_and_every_object_is_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: dict[str, Any], values: Any, path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or '.'}: open to unknown keys"
            for key, value in (values or {}).items():
                assert key in node["properties"], f"{path}{key}: in values.yaml, not in the schema"
                walk(node["properties"][key], value, f"{path}{key}.")
            for key, child in node["properties"].items():
                if key not in (values or {}):
                    walk(child, None, f"{path}{key}.")

    walk(schema, defaults, "")


def test_names_stay_within_63_characters_and_labels_are_standard() -> None:
    release = "long-release-" + "x" * 50  # `helm install` allows 53 characters, `helm template` more
    values = {"bmcSimulator": {"enabled": True}, "replicas": 2}
    docs = render_chart(CHART, values, release=release, api_versions=[SERVICE_MONITOR, PROMETHEUS_RULE])
    for doc in docs:
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and DNS_LABEL.fullmatch(name), (doc["kind"], name)
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/version"] == APP_VERSION != "", doc["kind"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"devicectl-{METADATA['version']}"
        assert labels["app.kubernetes.io/instance"] == release
        assert all(len(v) <= 63 for v in labels.values()), labels
    deployments = {d["metadata"]["name"] for d in by_kind(docs)["Deployment"]}
    assert len(deployments) == 2  # the controller's and the simulator's, still distinct when cut
    # a release already named for devicectl is not repeated
    assert by_kind(render_chart(CHART, release="devicectl-prod"))["Deployment"][0]["metadata"]["name"] == (
        "devicectl-prod"
    )
    assert container(by_kind(docs)["Deployment"][0])["image"] == f"devicectl:{APP_VERSION}"


def test_the_app_version_is_the_release_of_devicectl_the_chart_ships() -> None:
    project = tomllib.loads((CHART.parents[2] / "pyproject.toml").read_text())["project"]
    assert APP_VERSION == project["version"]


def test_a_network_policy_admits_only_labelled_clients_and_prometheus() -> None:
    docs = render_chart(CHART, {"workers": 2})
    (policy,) = by_kind(docs)["NetworkPolicy"]
    deployment = by_kind(docs)["Deployment"][0]
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    grpc, metrics = policy["spec"]["ingress"]
    assert [p["port"] for p in grpc["ports"]] == ["grpc"]
    # only pods labelled as devicectl's clients (any namespace) reach gRPC; only Prometheus the metrics
    assert grpc["from"] == [
        {"podSelector": {"matchLabels": {"devicectl.io/client": "true"}}, "namespaceSelector": {}}
    ]
    assert metrics["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}, "namespaceSelector": {}}
    ]
    assert [p["port"] for p in metrics["ports"]] == ["metrics", "metrics-w1", "metrics-w2"]
    named = {p["name"] for p in container(deployment)["ports"]}
    assert {p["port"] for rule in (grpc, metrics) for p in rule["ports"]} <= named  # ports it really has
    peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "topology"}}}]
    custom = by_kind(render_chart(CHART, {"networkPolicy": {"grpcFrom": peers}}))["NetworkPolicy"][0]
    assert custom["spec"]["ingress"][0]["from"] == peers
    kubernetes_validate.validate(custom, VERSIONS[0], strict=True)
    assert "NetworkPolicy" not in by_kind(render_chart(CHART, {"networkPolicy": {"enabled": False}}))


def test_service_monitor_and_rule_carry_the_labels_a_prometheus_selects_on() -> None:
    values = {
        "serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"labels": {"release": "kube-prometheus-stack", "role": "alert-rules"}},
    }
    kinds = by_kind(render_chart(CHART, values, api_versions=[SERVICE_MONITOR, PROMETHEUS_RULE]))
    assert kinds["ServiceMonitor"][0]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (rule,) = kinds["PrometheusRule"]
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    # the rule is the shipped rules file, the one deploy/prometheus links to
    shipped = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"] == shipped
    assert (DEPLOY / "prometheus" / "devicectl-alerts.yaml").resolve() == (CHART / "files" / "alerts.yaml")
    assert len(shipped["groups"][0]["rules"]) == 9
    # only where the operator's CRD is served (or forced)
    assert "PrometheusRule" not in by_kind(render_chart(CHART))
    assert "PrometheusRule" in by_kind(render_chart(CHART, {"prometheusRule": {"enabled": True}}))
    off = {"prometheusRule": {"enabled": False}}
    assert "PrometheusRule" not in by_kind(render_chart(CHART, off, api_versions=[PROMETHEUS_RULE]))


def test_placement_pull_secrets_and_grace_period_reach_every_pod() -> None:
    docs = render_chart(CHART, {**PLACEMENT, "bmcSimulator": {"enabled": True}})
    specs = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")]
    assert len(specs) == 3  # controller, simulator, migration Job
    for spec in specs:
        for key in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity"):
            assert spec[key] == PLACEMENT[key], key
    assert pod_spec(docs)["terminationGracePeriodSeconds"] == 45
    assert pod_spec(render_chart(CHART))["terminationGracePeriodSeconds"] == 30
    assert "affinity" not in pod_spec(render_chart(CHART))  # empty values render nothing


def test_sqlite_replaces_its_single_pod_instead_of_rolling() -> None:
    sqlite = by_kind(render_chart(CHART, COMBINATIONS["sqlite"]))["Deployment"][0]
    assert sqlite["spec"]["strategy"] == {"type": "Recreate"}  # two pods never open the file at once
    postgresql = by_kind(render_chart(CHART))["Deployment"][0]
    assert "strategy" not in postgresql["spec"]  # Kubernetes' RollingUpdate


def test_the_shadow_value_starts_serve_in_shadow_mode() -> None:
    shadowed = container(by_kind(render_chart(CHART, {"shadow": True}))["Deployment"][0])
    assert shadowed["args"][0] == "serve" and "--shadow" in shadowed["args"]
    live = container(by_kind(render_chart(CHART))["Deployment"][0])
    assert "--shadow" not in live["args"]
    assert "SHADOW MODE: every request is planned" in render_notes(CHART, {"shadow": True})
    assert "SHADOW" not in render_notes(CHART)
