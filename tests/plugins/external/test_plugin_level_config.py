"""nvml and redfish as Nomad device plugins: a plugin-level config schema of their own (not the
per-device inventory options), and an all-null config (what Nomad sends for `config {}`) accepted."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from plugins.base import Device, DeviceGroup, InvalidRequestError
from plugins.base.plugin_config import parse_duration, settings, unpack_config
from plugins.base.serving import apply_config, config_spec, plugin_config_schema
from plugins.nvml import NvmlPlugin
from plugins.nvml._plugin_config import PluginConfig
from plugins.redfish import RedfishPlugin


def all_null(plugin: object) -> bytes:
    """A Nomad client's msgpack for an empty `config {}`: every attribute, nil."""
    names = plugin_config_schema(plugin)["properties"]  # type: ignore[arg-type]
    return msgpack.packb(dict.fromkeys(names))


def test_nvml_offers_nomad_device_nvidias_settings_not_its_device_options() -> None:
    names = set(plugin_config_schema(NvmlPlugin())["properties"])
    assert {"enabled", "ignored_gpu_ids", "fingerprint_period"} <= names
    assert "power_scope" not in names  # a per-device option (inventory), not plugin config


async def test_nvml_takes_an_all_null_config_and_applies_the_defaults() -> None:
    plugin = NvmlPlugin()
    await apply_config(plugin, settings(unpack_config(config_spec(plugin), all_null(plugin))))
    assert plugin._config == PluginConfig() and plugin._fingerprint_interval == 30.0


async def test_nvml_full_config() -> None:
    plugin = NvmlPlugin()
    raw = {"enabled": True, "ignored_gpu_ids": ["GPU-1"], "fingerprint_period": "1m30s", "stream_timeout": 3}
    await apply_config(plugin, settings(unpack_config(config_spec(plugin), msgpack.packb(raw))))
    assert plugin._fingerprint_interval == 90.0 and plugin._stream_timeout == 3
    groups = (DeviceGroup("nvidia", "gpu", "H100", (Device("GPU-1", True), Device("GPU-2", True))),)
    assert [d.id for g in plugin._config.visible(groups) for d in g.devices] == ["GPU-2"]
    with pytest.raises(InvalidRequestError, match="GPU-1"):
        plugin._config.check_reserve(["GPU-1"])
    assert PluginConfig(enabled=False).visible(groups) == ()


def test_go_durations() -> None:
    assert [parse_duration(t, "p") for t in ("1m", "30s", "1h2m", "500ms", "0")] == [60, 30, 3720, 0.5, 0]
    with pytest.raises(InvalidRequestError, match="not a duration"):
        parse_duration("5", "fingerprint_period")


def test_redfish_plugin_config_is_its_own() -> None:
    names = set(plugin_config_schema(RedfishPlugin())["properties"])
    assert {"concurrency", "read_timeout", "endpoints", "username", "password_file"} <= names
    assert "password" not in names  # secrets never go into config


async def test_redfish_takes_an_all_null_config() -> None:
    plugin = RedfishPlugin()
    before = plugin.settings
    await apply_config(plugin, settings(unpack_config(config_spec(plugin), all_null(plugin))))
    assert plugin.settings == before and plugin._configured == ()


async def test_redfish_full_config(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    plugin = RedfishPlugin()
    raw = {
        "concurrency": 4,
        "read_timeout": 12,
        "endpoints": ["https://127.0.0.1:8443"],
        "username": "admin",
        "password_file": str(tmp_path / "pw"),
        "insecure": True,
    }
    await apply_config(plugin, settings(unpack_config(config_spec(plugin), msgpack.packb(raw))))
    assert (plugin.settings.concurrency, plugin.settings.read_timeout) == (4, 12)
    (target,) = plugin._configured
    assert target.device_id == "127.0.0.1:8443" and not target.endpoint.verify_tls
    assert target.endpoint.credentials is not None and target.endpoint.credentials.password == "s3cret"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"auth": "kerberos"}, "auth must be one of"),
        ({"endpoints": ["ftp://x"]}, "not an http"),
        ({"endpoints": ["https://x"], "username": "u"}, "username needs password_file"),
    ],
)
async def test_redfish_bad_config_is_one_line(raw: dict[str, object], message: str) -> None:
    plugin = RedfishPlugin()
    with pytest.raises(InvalidRequestError, match=message):
        await apply_config(plugin, settings(unpack_config(config_spec(plugin), msgpack.packb(raw))))
