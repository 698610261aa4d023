"""Settings, inventory and secrets: the data the controller starts from, with precise errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.config import Settings, load_settings, mask_url
from controller.inventory import InventoryError, entry_from_model, load_inventory
from controller.security.secrets import SecretStore
from plugins.base import HostEnvironmentError


def test_settings_layers_defaults_file_environment_flags(tmp_path: Path) -> None:
    config = tmp_path / "devicectl.toml"
    config.write_text('[devicectl]\nlisten = "0.0.0.0:6000"\nmax_concurrency = 7\nqueue_limit = 9\n')
    env = {"DEVICECTL_MAX_CONCURRENCY": "8", "DEVICECTL_AUTO_UPGRADE": "yes"}
    settings = load_settings(str(config), env=env, overrides={"queue_limit": 10})
    assert settings.listen == "0.0.0.0:6000"  # file over default
    assert settings.max_concurrency == 8  # environment over file
    assert settings.queue_limit == 10  # flag over file
    assert settings.auto_upgrade is True
    assert settings.device_call_timeout == Settings().device_call_timeout


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("bogus = 1\n", {}, "unknown setting(s) bogus"),
        ('max_concurrency = "many"\n', {}, "max_concurrency must be a int"),
        ("", {"DEVICECTL_AUTO_UPGRADE": "perhaps"}, "environment DEVICECTL_AUTO_UPGRADE"),
    ],
)
def test_settings_errors_name_the_source(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ValueError) as info:
        load_settings(str(config), env=env)
    assert message in str(info.value)


def test_database_passwords_are_masked() -> None:
    assert mask_url("postgresql+psycopg://app:s3cret@db:5432/x") == "postgresql+psycopg://app:***@db:5432/x"
    assert "s3cret" not in json.dumps(Settings(database_url="postgresql://a:s3cret@h/d").display())


def test_inventory_parses_devices_with_connection_details(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(
        '[defaults]\nplugin = "redfish"\n\n'
        '[[device]]\nid = "node001"\nmodel = "DGX_GB200"\n'
        '[device.redfish]\nurl = "https://10.0.0.1"\nsecret = "node001"\n'
        'ca_bundle = "/ca.pem"\nconcurrency = 3\n\n'
        '[[device]]\nid = "gpu-node"\nplugin = "nvml"\nmodel = { Model = "DGX_H100", note = "x" }\n'
    )
    inventory = load_inventory(path)
    node = inventory["node001"]
    assert (node.plugin, node.url, node.secret, node.ca_bundle) == (
        "redfish",
        "https://10.0.0.1",
        "node001",
        "/ca.pem",
    )
    assert node.model == {"Model": "DGX_GB200"} and node.options == {"concurrency": 3} and not node.insecure
    assert inventory["gpu-node"].plugin == "nvml" and inventory["gpu-node"].model["note"] == "x"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[[device]]\nplugin = "redfish"\n', "`id` must be a non-empty string"),
        ('[[device]]\nid = "a"\n', "`plugin` must name a plugin"),
        (
            '[[device]]\nid = "a"\nplugin = "redfish"\n[[device]]\nid = "a"\nplugin = "redfish"\n',
            "duplicate id 'a'",
        ),
        (
            '[[device]]\nid = "a"\nplugin = "redfish"\n[device.redfish]\nurl = "ftp://x"\n',
            "must start with https://",
        ),
        (
            '[[device]]\nid = "a"\nplugin = "redfish"\n[device.redfish]\ninsecure = "yes"\n',
            "`insecure` must be",
        ),
        ("[[device]\n", "not valid TOML"),
    ],
)
def test_inventory_errors_name_the_device_and_key(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(body)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_devices_can_come_from_the_request_model_json() -> None:
    model = {"Model": "DGX_GB200", "Redfish": {"URL": "https://bmc7", "SecretName": "node7"}}
    entry = entry_from_model("node7", model, "redfish")
    assert entry is not None and (entry.url, entry.secret, entry.plugin) == (
        "https://bmc7",
        "node7",
        "redfish",
    )
    assert entry_from_model("x", {"Model": "DGX_GB200"}, "redfish") is None


def test_secret_layouts(tmp_path: Path) -> None:
    (tmp_path / "flat").write_text(json.dumps({"username": "u1", "password": "p1"}))
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "bmc").write_text(json.dumps({"username": "u2", "password": "p2"}))
    (tmp_path / "split").mkdir()
    (tmp_path / "split" / "username").write_text("u3\n")
    (tmp_path / "split" / "password").write_text("p3\n")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            path.chmod(0o600)  # group/other-readable secret files are refused
    store = SecretStore(tmp_path, env={"DEVICECTL_SECRET_FROM_ENV": '{"username": "u4", "password": "p4"}'})
    assert store.credentials("flat").password == "p1"
    assert store.credentials("k8s").username == "u2"
    assert (store.credentials("split").username, store.credentials("split").password) == ("u3", "p3")
    assert store.credentials("from-env").password == "p4"
    assert "p1" not in repr(store.credentials("flat"))


def test_a_secret_is_read_again_when_its_file_changes_and_its_mode_checked_every_time(tmp_path: Path) -> None:
    secret = tmp_path / "node"
    secret.write_text(json.dumps({"username": "u", "password": "old"}))
    secret.chmod(0o600)
    store = SecretStore(tmp_path, env={})
    assert store.credentials("node").password == "old"
    secret.write_text(json.dumps({"username": "u", "password": "new"}))  # same size, in place
    assert store.credentials("node").password == "new"
    # a Kubernetes rotation: the `..data` link swapped to a new directory
    (tmp_path / "k8s").mkdir()
    for version, password in (("v1", "first"), ("v2", "second")):
        (tmp_path / "k8s" / version).mkdir()
        (tmp_path / "k8s" / version / "bmc").write_text(json.dumps({"username": "u", "password": password}))
        (tmp_path / "k8s" / version / "bmc").chmod(0o600)
    (tmp_path / "k8s" / "data").symlink_to("v1")
    (tmp_path / "k8s" / "bmc").symlink_to("data/bmc")
    assert store.credentials("k8s").password == "first"
    (tmp_path / "k8s" / "data.new").symlink_to("v2")
    (tmp_path / "k8s" / "data.new").rename(tmp_path / "k8s" / "data")
    assert store.credentials("k8s").password == "second"
    secret.chmod(0o644)
    with pytest.raises(HostEnvironmentError, match="readable by group or others"):
        store.credentials("node")
    secret.chmod(0o600)
    assert store.credentials("node").password == "new"
    secret.unlink()
    with pytest.raises(HostEnvironmentError, match="secret 'node' not found"):
        store.credentials("node")
    # a removed secret's text is not kept in the process either
    assert all("new" not in text for _, text in store._texts.values())


def test_secret_errors_never_show_the_secret(tmp_path: Path) -> None:
    (tmp_path / "broken").write_text('{"username": "u", "pass": "hunter2"}')
    (tmp_path / "broken").chmod(0o600)
    store = SecretStore(tmp_path, env={})
    with pytest.raises(HostEnvironmentError) as info:
        store.credentials("broken")
    assert "hunter2" not in str(info.value) and "malformed" in str(info.value)
    with pytest.raises(HostEnvironmentError, match="secret 'missing' not found"):
        store.credentials("missing")
    with pytest.raises(HostEnvironmentError, match="not a valid name"):
        store.credentials("../etc/passwd")
