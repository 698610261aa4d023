"""The Helm chart installs and stays up: each values combination (defaults, TLS, workers,
PostgreSQL replicas, SQLite) renders manifests that Kubernetes' own OpenAPI schemas accept (strict:
no unknown field), from the schemas `kubernetes-validate` ships, for the oldest Kubernetes the
chart supports (gRPC probes: 1.27) and the newest the package knows. The ServiceMonitor is a CRD
(no schema ships): its shape is checked here, and it renders only when asked or when the cluster
serves the CRD.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from controller.config import load_settings
from controller.security import certs
from controller.security.tls import callback_tls, check_settings
from tests.deploy._helm import ChartFailure, render_chart, render_notes
from tests.deploy.test_deploy import CHART, by_kind, container, env_of

SERVICE_MONITOR = "monitoring.coreos.com/v1/ServiceMonitor"
PROMETHEUS_RULE = "monitoring.coreos.com/v1/PrometheusRule"
#: pod placement and pull secrets, as an operator would set them
PLACEMENT = {
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "control", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "devicectl"}},
                    },
                }
            ]
        }
    },
    "terminationGracePeriodSeconds": 45,
}
VERSIONS = ("1.27.0", latest_version())
TLS = {"tls": {"enabled": True, "clientCA": True}, "probes": {"type": "http"}}
CALLBACK_TLS = {
    "callback": {
        "tls": {
            "enabled": True,
            "caSecretName": "topology-ca",
            "clientSecretName": "devicectl-callback-client",
            "serverName": "topology.internal",
        }
    }
}
#: plaintext gRPC, named for what it is (the chart refuses tls.enabled false without it)
PLAINTEXT = {
    "tls": {"enabled": False},
    "insecure": True,
    "probes": {"type": "grpc"},
    "callback": {"tls": {"enabled": False}, "allowPlaintext": True},
}
COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "plaintext": PLAINTEXT,
    "tls-secret": {"tls": {"source": "secret", "secretName": "devicectl-tls"}},
    "tls": {**TLS, **CALLBACK_TLS},
    "workers": {"workers": 2},
    "postgresql": {"replicas": 3, "workers": 1, "database": {"engine": "postgresql"}, **PLACEMENT},
    "sqlite": {"database": {"engine": "sqlite"}, "persistence": {"existingClaim": "devicectl-data"}},
    "simulator": {"bmcSimulator": {"enabled": True, "count": 2}, "serviceMonitor": {"enabled": True}},
    "shadow": {"shadow": True},
}


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in by_kind(docs)["Deployment"] if d["metadata"]["name"] == "test-devicectl")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_each_combination_validates_against_kubernetes_schemas(name: str) -> None:
    docs = render_chart(CHART, COMBINATIONS[name], api_versions=[SERVICE_MONITOR, PROMETHEUS_RULE])
    checked = 0
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            check_service_monitor(doc)
            continue
        if doc["kind"] == "PrometheusRule":
            check_prometheus_rule(doc)
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError
            checked += 1
    assert checked >= 2 * 4  # at least Deployment, Service, ConfigMap, ServiceAccount
    assert {"ServiceMonitor", "PrometheusRule"} <= set(by_kind(docs))


def test_the_validator_rejects_what_kubernetes_rejects() -> None:
    """The schemas bite: a probe with two handlers' fields misspelled, a port as a word."""
    deployment = by_kind(render_chart(CHART))["Deployment"][0]
    container(deployment)["livenessProbe"]["grpcc"] = {"port": 1}
    with pytest.raises(kubernetes_validate.ValidationError, match="grpcc"):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)
    service = by_kind(render_chart(CHART))["Service"][0]
    service["spec"]["ports"][0]["port"] = "grpc"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, VERSIONS[0], strict=True)
    with pytest.raises(SchemaNotFoundError):  # CRDs have no schema here: checked by hand below
        kubernetes_validate.validate(
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor"}, "1.27"
        )


def check_service_monitor(doc: dict[str, Any]) -> None:
    """The fields the Prometheus Operator's ServiceMonitor CRD (monitoring.coreos.com/v1) reads."""
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    spec = doc["spec"]
    assert set(spec) == {"selector", "endpoints"} and set(spec["selector"]) == {"matchLabels"}
    for endpoint in spec["endpoints"]:
        assert set(endpoint) == {"port", "path", "interval"} and endpoint["path"] == "/metrics"


def check_prometheus_rule(doc: dict[str, Any]) -> None:
    """The fields the Prometheus Operator's PrometheusRule CRD reads: groups of named rules."""
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"} and set(doc["spec"]) == {"groups"}
    for group in doc["spec"]["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"} and rule["expr"]


def test_the_service_monitor_renders_only_when_asked_or_when_its_crd_exists() -> None:
    assert "ServiceMonitor" not in by_kind(render_chart(CHART))  # a bare cluster: install succeeds
    assert "ServiceMonitor" in by_kind(render_chart(CHART, api_versions=[SERVICE_MONITOR]))
    assert "ServiceMonitor" in by_kind(render_chart(CHART, {"serviceMonitor": {"enabled": True}}))
    off = {"serviceMonitor": {"enabled": False}}
    assert "ServiceMonitor" not in by_kind(render_chart(CHART, off, api_versions=[SERVICE_MONITOR]))


def test_every_metrics_port_of_the_executors_is_exposed_and_scraped() -> None:
    kinds = by_kind(render_chart(CHART, {"workers": 3}, api_versions=[SERVICE_MONITOR]))
    ports = {p["name"]: p["containerPort"] for p in container(kinds["Deployment"][0])["ports"]}
    # executor i serves its metrics on metricsPort + i (controller/process/workers.py, executor_settings)
    assert ports == {
        "grpc": 50051,
        "metrics": 9464,
        "metrics-w1": 9465,
        "metrics-w2": 9466,
        "metrics-w3": 9467,
    }
    service = {p["name"]: (p["port"], p["targetPort"]) for p in kinds["Service"][0]["spec"]["ports"]}
    assert {name: port for name, (port, _) in service.items()} == ports
    assert all(target == name for name, (_, target) in service.items() if name != "grpc")
    scraped = {e["port"] for e in kinds["ServiceMonitor"][0]["spec"]["endpoints"]}
    assert scraped == {"metrics", "metrics-w1", "metrics-w2", "metrics-w3"}


def test_the_schema_is_migrated_before_the_controller_starts() -> None:
    """PostgreSQL: a pre-install/pre-upgrade hook Job (a rollback runs none, so an older image never
    crash-loops on a newer schema); SQLite: the pod's init container, on the volume of its file."""
    docs = render_chart(CHART)
    pod = pod_spec(docs)
    assert "initContainers" not in pod
    (job,) = by_kind(docs)["Job"]
    hooks = job["metadata"]["annotations"]
    assert hooks["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert set(hooks["helm.sh/hook-delete-policy"].split(",")) == {"before-hook-creation", "hook-succeeded"}
    job_pod = job["spec"]["template"]["spec"]
    (migrate,) = job_pod["containers"]
    assert migrate["args"] == ["db", "upgrade"] and job_pod["restartPolicy"] == "Never"
    assert env_of(migrate)["DEVICECTL_DATABASE_URL"] == env_of(pod["containers"][0])["DEVICECTL_DATABASE_URL"]
    # the chart's ServiceAccount does not exist before a first install: the Job must not name it
    assert "serviceAccountName" not in job_pod and job_pod["automountServiceAccountToken"] is False
    # its pods are not the controller's: the Service never selects them
    service = by_kind(docs)["Service"][0]["spec"]["selector"]
    assert not service.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    # SQLite: the file lives on the volume both containers mount
    sqlite_docs = render_chart(CHART, COMBINATIONS["sqlite"])
    assert "Job" not in by_kind(sqlite_docs)
    sqlite = pod_spec(sqlite_docs)
    mounts = {m["name"]: m["mountPath"] for m in sqlite["initContainers"][0]["volumeMounts"]}
    assert mounts["data"] == "/var/lib/devicectl"
    assert {v["name"]: v for v in sqlite["volumes"]}["data"]["persistentVolumeClaim"]["claimName"] == (
        "devicectl-data"
    )
    off = render_chart(CHART, {**COMBINATIONS["sqlite"], "migrations": {"enabled": False}})
    assert "initContainers" not in pod_spec(off)
    assert "Job" not in by_kind(render_chart(CHART, {"migrations": {"enabled": False}}))


def test_tls_needs_a_callback_that_devicectl_accepts() -> None:
    with pytest.raises(ChartFailure, match=r"callback\.tls\.enabled"):
        # devicectl would refuse the plaintext callback and crash-loop
        render_chart(CHART, {**TLS, "callback": {"tls": {"enabled": False}}})
    pod = pod_spec(render_chart(CHART, {**TLS, **CALLBACK_TLS}))
    env = env_of(pod["containers"][0])
    assert "DEVICECTL_INSECURE" not in env
    assert env["DEVICECTL_CALLBACK_TLS"] == "true"
    assert env["DEVICECTL_CALLBACK_CA_CERT"] == "/etc/devicectl/callback-ca/ca.crt"
    assert env["DEVICECTL_CALLBACK_CERT"] == "/etc/devicectl/callback-client/tls.crt"
    assert env["DEVICECTL_CALLBACK_SERVER_NAME"] == "topology.internal"
    assert env["DEVICECTL_TLS_CLIENT_CA"] == "/etc/devicectl/tls/ca.crt"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["callback-ca"] == "/etc/devicectl/callback-ca"
    volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    assert volumes["callback-ca"]["secretName"] == "topology-ca"
    assert volumes["callback-client"]["secretName"] == "devicectl-callback-client"
    plaintext = env_of(
        pod_spec(
            render_chart(CHART, {**TLS, "callback": {"tls": {"enabled": False}, "allowPlaintext": True}})
        )["containers"][0]
    )
    assert plaintext["DEVICECTL_INSECURE"] == "true" and "DEVICECTL_CALLBACK_TLS" not in plaintext


def test_plaintext_and_grpc_probes_are_refused_unless_named_insecure() -> None:
    """The defaults serve TLS with client certificates and roles; plaintext is a choice by name."""
    with pytest.raises(ChartFailure, match=r"set insecure: true"):
        render_chart(CHART, {"tls": {"enabled": False}})
    with pytest.raises(ChartFailure, match=r"kubelet's gRPC probe speaks plaintext only"):
        render_chart(CHART, {"probes": {"type": "grpc"}})
    with pytest.raises(ChartFailure, match=r"tls.clientCA needs roles"):
        render_chart(CHART, {"roles": None})  # null removes a default map in Helm
    with pytest.raises(ChartFailure, match=r"invalid propertyName"):  # identities name Secrets too
        render_chart(CHART, {"roles": {"Bad Name!": ["admin"]}})
    with pytest.raises(ChartFailure, match=r"issuerRef.name"):
        render_chart(CHART, {"tls": {"source": "certManager"}})
    env = env_of(pod_spec(render_chart(CHART, PLAINTEXT))["containers"][0])
    assert env["DEVICECTL_INSECURE"] == "true" and "DEVICECTL_TLS_CERT" not in env
    assert "DEVICECTL_ROLES" not in env
    assert "Secret" not in by_kind(render_chart(CHART, PLAINTEXT))


def test_cert_manager_issues_the_server_certificate_for_the_service_names() -> None:
    issuer = {"name": "devicectl-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    docs = render_chart(CHART, {"tls": {"source": "certManager", "certManager": {"issuerRef": issuer}}})
    (certificate,) = [d for d in docs if d["kind"] == "Certificate"]
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    assert certificate["spec"]["issuerRef"] == issuer
    assert certificate["spec"]["secretName"] == "test-devicectl-tls"
    assert "test-devicectl.default.svc" in certificate["spec"]["dnsNames"]
    volumes = {v["name"]: v["secret"] for v in pod_spec(docs)["volumes"] if "secret" in v}
    assert volumes["tls"]["secretName"] == "test-devicectl-tls"
    assert "Secret" not in by_kind(docs)  # cert-manager writes it


def test_a_config_change_rolls_the_pods_and_no_subpath_hides_updates() -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = by_kind(render_chart(CHART, values))["Deployment"][0]
        annotation: str = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return annotation

    defaults = render_chart(CHART)
    config_map = by_kind(defaults)["ConfigMap"][0]["data"]
    expected = hashlib.sha256(
        (config_map["devicectl.toml"] + config_map["inventory.toml"]).encode()
    ).hexdigest()
    assert checksum({}) == expected
    assert checksum({"inventory": '[defaults]\nplugin = "nvml"\n'}) != expected
    assert checksum({"config": '[devicectl]\nlog_format = "text"\n'}) != expected
    mounts = pod_spec(defaults)["containers"][0]["volumeMounts"]
    assert all("subPath" not in m for m in mounts)


def test_probes_ask_liveness_of_the_process_and_readiness_of_the_journal() -> None:
    c = pod_spec(render_chart(CHART, PLAINTEXT))["containers"][0]
    assert c["startupProbe"]["grpc"] == {"port": 50051, "service": "liveness"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 60
    assert c["livenessProbe"]["grpc"] == {"port": 50051, "service": "liveness"}
    assert c["readinessProbe"]["grpc"] == {"port": 50051, "service": "devicecontroller.v1.DeviceController"}
    http = pod_spec(render_chart(CHART, {**TLS, **CALLBACK_TLS}))["containers"][0]
    assert (
        http["startupProbe"]["httpGet"]
        == http["livenessProbe"]["httpGet"]
        == {"path": "/healthz", "port": "metrics"}
    )
    assert http["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_service_account_without_a_token_and_a_disruption_budget_for_replicas() -> None:
    kinds = by_kind(render_chart(CHART))
    (account,) = kinds["ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    pod = pod_spec(render_chart(CHART))
    assert (
        pod["serviceAccountName"] == account["metadata"]["name"]
        and pod["automountServiceAccountToken"] is False
    )
    assert "PodDisruptionBudget" not in kinds  # one pod: a budget would block every drain
    (budget,) = by_kind(render_chart(CHART, {"replicas": 3}))["PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"] == kinds["Deployment"][0]["spec"]["selector"]["matchLabels"]
    )


def test_notes_say_how_to_check_the_install() -> None:
    notes = render_notes(CHART, {"workers": 2})
    assert notes.startswith("devicectl 0.1.0 is installed as test-devicectl")  # appVersion
    assert "kubectl rollout status deployment/test-devicectl" in notes
    assert "hook Job test-devicectl-migrate" in notes and "/readyz" in notes
    assert 'scrape port "metrics" and "metrics-w1".."metrics-w2"' in notes
    assert "{{" not in notes


@pytest.mark.parametrize("name", ["defaults", "tls"])
def test_the_pod_settings_pass_devicectls_own_start_checks(name: str, tmp_path: Path) -> None:
    """What `serve` checks before it starts (controller/security/tls.py, check_settings), on the settings
    the pod would load, with real certificates from a test CA laid out as the Secrets mount them."""
    made = certs.init(tmp_path / "ca", clients=("devicectl",))
    layout = {
        "/etc/devicectl/tls/tls.crt": made.server_cert,
        "/etc/devicectl/tls/tls.key": made.server_key,
        "/etc/devicectl/tls/ca.crt": made.ca,
        "/etc/devicectl/callback-ca/ca.crt": made.ca,
        "/etc/devicectl/callback-client/tls.crt": made.clients["devicectl"][0],
        "/etc/devicectl/callback-client/tls.key": made.clients["devicectl"][1],
    }
    c = container(by_kind(render_chart(CHART, COMBINATIONS[name]))["Deployment"][0])
    env = {k: str(layout.get(v, v)) for k, v in env_of(c).items() if isinstance(v, str)}
    settings = load_settings(None, env={**env, "DEVICECTL_LISTEN": "0.0.0.0:50051"})
    check_settings(settings)  # raises ValueError on what would crash-loop the pod
    assert settings.callback == "topology.example.internal:50052"
    if name == "tls":
        assert settings.tls_cert == str(made.server_cert) and not settings.insecure
        assert callback_tls(settings).enabled
    # and the refused combination is refused by devicectl too, not only by the chart
    if name == "tls":
        plain = {k: v for k, v in env.items() if not k.startswith("DEVICECTL_CALLBACK_")}
        plain["DEVICECTL_CALLBACK"] = "topology.example.internal:50052"
        with pytest.raises(ValueError, match="topology callback"):
            check_settings(load_settings(None, env={**plain, "DEVICECTL_LISTEN": "0.0.0.0:50051"}))


def helm_commands(text: str) -> list[list[str]]:
    """`helm install`/`helm upgrade` command lines in a Markdown text (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [shlex.split(line.strip()) for line in joined.splitlines() if line.strip().startswith("helm ")]


def values_of(argv: list[str]) -> dict[str, Any]:
    """The values a helm command line sets, parsed by Helm's own parsers (`--set`, `--set-json`;
    `--set-file k=path` as a placeholder inventory)."""
    out: dict[str, Any] = {}
    for flag, arg in itertools.pairwise(argv):
        if flag == "--set":
            _merge(out, helm_python.parse_set_string(arg))
        elif flag == "--set-json":
            _merge(out, helm_python.parse_set_json(arg))
        elif flag == "--set-file":
            key = arg.partition("=")[0]
            _merge(out, helm_python.parse_set_literal(f"{key}=[defaults]\n"))
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


@pytest.mark.parametrize("doc", ["README.md", "docs/operations.md"])
def test_the_documented_helm_commands_set_real_values_and_render_valid_manifests(doc: str) -> None:
    commands = [
        c for c in helm_commands((CHART.parents[2] / doc).read_text()) if c[1] in ("install", "upgrade")
    ]
    assert commands, f"{doc} documents no helm install"
    for argv in commands:
        # ChartFailure: the documented line fails, or sets a value values.schema.json does not know
        for manifest in render_chart(CHART, values_of(argv)):
            if manifest["kind"] != "ServiceMonitor":
                kubernetes_validate.validate(manifest, VERSIONS[0], strict=True)
