"""Defect 12: what `serve` refuses at start (secret files others can read, unknown plugins,
misspelt or mistyped plugin options) and the secret allow-list's matching rules."""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import pytest

from controller.app import Controller
from controller.config import Settings, load_settings
from controller.inventory import InventoryError, load_secret_rules, option_errors
from controller.security.authz import parse_roles
from controller.security.secrets import SecretPolicy, SecretStore
from plugins.base import HostEnvironmentError
from plugins.redfish import RedfishPlugin


def _settings(tmp_path: Path, inventory: Path, **kw: object) -> Settings:
    return Settings(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{tmp_path}/d.db",
        callback="",
        auto_upgrade=True,
        inventory=str(inventory),
        secrets_dir=str(tmp_path / "secrets"),
        **kw,  # type: ignore[arg-type]
    )


def _inventory(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "inventory.toml"
    path.write_text(textwrap.dedent(body))
    return path


def _secret(tmp_path: Path, name: str, mode: int) -> Path:
    (tmp_path / "secrets").mkdir(exist_ok=True)
    path = tmp_path / "secrets" / name
    path.write_text(json.dumps({"username": "root", "password": "pw-canary"}))
    path.chmod(mode)
    return path


GOOD = """
    [[device]]
    id = "node1"
    plugin = "redfish"
    [device.redfish]
    url = "https://127.0.0.1:9"
    secret = "bmc"
"""


async def test_unknown_plugin_and_misspelt_options_are_refused_at_start_with_a_list(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        """
        [[device]]
        id = "node1"
        plugin = "redfsh"

        [[device]]
        id = "node2"
        plugin = "redfish"
        [device.redfish]
        url = "https://127.0.0.1:9"
        concurency = 4
        auth = "kerberos"
        read_timeout = "slow"

        [[device]]
        id = "node3"
        plugin = "tests.memory_plugin:NoSuchClass"
        """,
    )
    controller = Controller(_settings(tmp_path, inventory))
    with pytest.raises(InventoryError) as info:
        await controller.start()
    await controller.store.close()
    text = str(info.value)
    assert "device 'node1': unknown plugin 'redfsh' (installed: " in text and "nvml" in text
    assert "device 'node2': unknown option(s) concurency (known: " in text
    assert "option auth must be one of" in text
    assert "option read_timeout must be of type number, got 'slow'" in text
    assert "plugin 'tests.memory_plugin:NoSuchClass' cannot be loaded" in text
    assert "\n" in text and "Traceback" not in text


async def test_a_secret_file_others_can_read_is_refused_at_start(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, GOOD)
    _secret(tmp_path, "bmc", 0o644)
    controller = Controller(_settings(tmp_path, inventory))
    with pytest.raises(
        InventoryError, match=r"secret 'bmc': .* is readable by group or others \(mode 0644\)"
    ):
        await controller.start()
    await controller.store.close()


async def test_readable_secrets_can_be_accepted_explicitly_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = _inventory(tmp_path, GOOD)
    _secret(tmp_path, "bmc", 0o640)
    controller = Controller(_settings(tmp_path, inventory, secrets_allow_readable=True))
    await controller.start()
    try:
        caplog.set_level(logging.WARNING, logger="controller.security.secrets")
        creds = controller.secrets.credentials("bmc", for_url="https://127.0.0.1:9")
        assert creds.password == "pw-canary"
        assert any("readable by group or others (mode 0640)" in r.getMessage() for r in caplog.records)
        assert not any("pw-canary" in r.getMessage() for r in caplog.records)
    finally:
        await controller.stop()


def test_a_readable_secret_is_refused_at_use_too(tmp_path: Path) -> None:
    _secret(tmp_path, "bmc", 0o604)
    store = SecretStore(tmp_path / "secrets", env={})
    with pytest.raises(HostEnvironmentError, match="readable by group or others") as info:
        store.credentials("bmc")
    assert "pw-canary" not in str(info.value)
    _secret(tmp_path, "bmc", 0o600)
    assert store.credentials("bmc").password == "pw-canary"


def test_secret_policy_matching() -> None:
    policy = SecretPolicy(
        bound={"inv": ["https://bmc1.example.com", "https://10.0.0.5:8443"]},
        allow={"fleet": ["10.1.0.0/16", "*.bmc.example.com", "bmc9.example.com:443"], "any": ["*"]},
    )
    policy.check("inv", "https://BMC1.example.com:443/redfish/v1")
    policy.check("inv", "https://10.0.0.5:8443")
    policy.check("fleet", "https://10.1.200.7")
    policy.check("fleet", "https://node1.bmc.example.com")
    policy.check("fleet", "https://bmc9.example.com")
    policy.check("any", "https://anything.example")
    for secret, url in [
        ("inv", "https://bmc1.example.com:444"),  # another port on a bound host
        ("inv", "http://bmc1.example.com"),  # another scheme
        ("inv", "https://10.0.0.5"),
        ("fleet", "https://10.2.0.1"),
        ("fleet", "https://evil-bmc.example.com.attacker.net"),
        ("fleet", "https://bmc9.example.com:8443"),
        ("fleet", "not a url"),
        ("unknown", "https://bmc1.example.com"),
    ]:
        with pytest.raises(HostEnvironmentError, match="is not allowed for"):
            policy.check(secret, url)


def test_secret_rules_are_read_from_the_inventory(tmp_path: Path) -> None:
    path = _inventory(tmp_path, GOOD + '\n[secrets.bmc]\nallow = ["10.0.0.0/8"]\n')
    assert load_secret_rules(path) == {"bmc": ("10.0.0.0/8",)}
    bad = _inventory(tmp_path, GOOD + '\n[secrets.bmc]\nallow = "10.0.0.0/8"\nextra = 1\n')
    with pytest.raises(InventoryError, match=r"\[secrets.bmc\] must hold only allow"):
        load_secret_rules(bad)


def test_option_errors_follow_the_plugins_schema() -> None:
    schema = RedfishPlugin().config_schema()
    assert option_errors(schema, {"concurrency": 4, "auth": "basic", "platform": "controls"}) == []
    assert option_errors(schema, {"concurrency": 0}) == ["option concurrency = 0 is out of range (minimum 1)"]
    assert option_errors(schema, {"keepalive": "yes"}) == [
        "option keepalive must be of type boolean, got 'yes'"
    ]
    assert option_errors(schema, {"concurrency": True}) == [
        "option concurrency must be of type integer, got True"
    ]


def test_roles_from_a_config_table_or_a_string(tmp_path: Path) -> None:
    config = tmp_path / "devicectl.toml"
    config.write_text('[roles]\n"topology.example" = "topology"\nalice = ["operator", "admin"]\n')
    roles = parse_roles(load_settings(str(config), env={}).roles)
    assert roles == {"topology.example": {"topology"}, "alice": {"operator", "admin"}}
    assert parse_roles("a=topology, b=operator+admin,") == {"a": {"topology"}, "b": {"operator", "admin"}}
    with pytest.raises(ValueError, match="unknown role"):
        parse_roles({"x": "root"})
