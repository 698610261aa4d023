"""The deployment kit: the chart renders (by Helm itself: tests/deploy/_helm.py) into manifests of the
right shape, and the example config, inventory, chart config and unit load through the real
loaders and command line parser."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from controller.cli import _parser
from controller.config import Settings, load_settings
from controller.inventory import (
    check_inventory,
    load_inventory,
    load_secret_rules,
    plugin_registry,
    secret_policy,
)
from controller.security.secrets import SecretStore
from tests.deploy._helm import render_chart

DEPLOY = Path(__file__).parents[2] / "deploy"
CHART = DEPLOY / "helm" / "devicectl"


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= set(doc), doc
        out.setdefault(doc["kind"], []).append(doc)
    return out


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]["containers"][0]


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_default_chart_renders_a_probed_non_root_deployment(tmp_path: Path) -> None:
    kinds = by_kind(render_chart(CHART))
    # no ServiceMonitor on a cluster without the Prometheus Operator (tests/deploy/test_chart_schemas.py)
    assert set(kinds) == {
        "ConfigMap",
        "Deployment",
        "Job",
        "NetworkPolicy",
        "Secret",
        "Service",
        "ServiceAccount",
    }
    deployment = kinds["Deployment"][0]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    c = container(deployment)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}  # TLS: no gRPC probe
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = env_of(c)
    assert env["DEVICECTL_DATABASE_URL"] == {"secretKeyRef": {"name": "devicectl-database", "key": "url"}}
    assert "DEVICECTL_INSECURE" not in env  # TLS with client certificates and roles by default
    assert env["DEVICECTL_TLS_CLIENT_CA"] == "/etc/devicectl/tls/ca.crt"
    assert env["DEVICECTL_ROLES"] == (
        "devicectl-admin=operator+admin,devicectl-operator=operator,topology=topology"
    )
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["bmc-secrets"]["secret"]["defaultMode"] == 0o400
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["bmc-secrets"]["readOnly"] is True
    ports = {p["name"]: p["port"] for p in kinds["Service"][0]["spec"]["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9464}
    assert c["resources"]["limits"]["memory"] == "1Gi"

    # the container's command line and the chart's config load through the real parser and loaders
    config_map = kinds["ConfigMap"][0]["data"]
    (tmp_path / "devicectl.toml").write_text(config_map["devicectl.toml"])
    (tmp_path / "inventory.toml").write_text(config_map["inventory.toml"])
    args = [a.replace("/etc/devicectl/config", str(tmp_path)) for a in c["args"]]
    parsed = _parser().parse_args(args)
    env_settings = {k: v for k, v in env.items() if isinstance(v, str)}
    names = set(Settings.__dataclass_fields__)
    flags = {k: v for k, v in vars(parsed).items() if k in names}
    settings = load_settings(parsed.config, env=env_settings, overrides=flags)
    assert settings.listen == "0.0.0.0:50051" and settings.metrics_listen == "0.0.0.0:9464"
    assert settings.log_format == "json" and settings.insecure is False
    assert settings.callback == "topology.example.internal:50052"  # DEVICECTL_CALLBACK
    assert load_inventory(settings.inventory) == {}


def test_chart_with_tls_http_probes_and_the_simulator() -> None:
    values = {
        "tls": {"enabled": True},
        "callback": {"tls": {"enabled": True}},
        "probes": {"type": "http"},
        "serviceMonitor": {"enabled": False},
        "bmcSimulator": {"enabled": True, "count": 2},
    }
    kinds = by_kind(render_chart(CHART, values))
    assert "ServiceMonitor" not in kinds
    controller, simulator = sorted(
        kinds["Deployment"], key=lambda d: d["metadata"]["name"] != "test-devicectl"
    )
    c = container(controller)
    env = env_of(c)
    assert env["DEVICECTL_TLS_CERT"] == "/etc/devicectl/tls/tls.crt" and "DEVICECTL_INSECURE" not in env
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {v["name"] for v in controller["spec"]["template"]["spec"]["volumes"]} >= {"tls", "bmc-secrets"}
    sim = container(simulator)
    assert sim["args"][0] == "bmc-sim" and sim["args"][sim["args"].index("--count") + 1] == "2"
    assert {s["metadata"]["name"] for s in kinds["Service"]} == {"test-devicectl", "test-devicectl-bmc-sim"}


def test_example_config_and_inventory_load() -> None:
    settings = load_settings(str(DEPLOY / "examples" / "devicectl.toml"), env={})
    assert settings.metrics_listen == "0.0.0.0:9464" and settings.log_format == "json"
    assert "topology.example.internal=topology" in settings.roles
    path = DEPLOY / "examples" / "inventory.toml"
    inventory = load_inventory(path)
    assert len(inventory) == 3 and {e.plugin for e in inventory.values()} == {"redfish"}
    secrets = SecretStore(None, policy=secret_policy(inventory, load_secret_rules(path)))
    assert check_inventory(inventory, plugin_registry(inventory, "redfish"), secrets) == []


def test_systemd_unit_is_hardened_and_its_command_parses() -> None:
    lines = (DEPLOY / "systemd" / "devicectl.service").read_text().splitlines()
    entries = [line.split("=", 1) for line in lines if "=" in line and not line.startswith("#")]
    unit = {k: v for k, v in entries}
    for key, value in {
        "User": "devicectl",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
        "KillSignal": "SIGTERM",
    }.items():
        assert unit.get(key) == value, key
    command = shlex.split(unit["ExecStart"])
    assert command[0].endswith("/devicectl")
    assert _parser().parse_args(command[1:]).log_format == "json"


def test_dockerfile_is_multi_stage_and_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2
    user = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert user and not user[-1].startswith(("0", "root"))
