"""A plugin's config holds finite numbers in range, on both paths: `[[plugin]] config` in TOML
(decoded on the host) and a Nomad client's msgpack SetConfig (decoded by the plugin's own gRPC
server). NaN, infinities, "nan", huge values, mixed-type map keys and broken msgpack are each one
clear line; nothing escapes as a raw ValueError, OverflowError or TypeError."""

from __future__ import annotations

import asyncio
import math
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plugins.base import Endpoint, InvalidRequestError
from plugins.base import nomad as n
from plugins.base.plugin_config import ConfigField, ConfigSpec, decode_config, unpack_config
from plugins.base.serving import config_spec
from plugins.filedevices import FileDevicesPlugin
from plugins.nvml._plugin_config import SCHEMA as NVML_SCHEMA
from plugins.nvml._plugin_config import PluginConfig
from plugins.redfish import RedfishPlugin
from plugins.redfish._config import ConnectionSettings, RedfishSettings
from plugins.redfish._plugin_config import settings_from
from tests.plugins.external import nomad_client as nc
from tests.plugins.external.test_nomad_client import BP, Launched

REDFISH = config_spec(RedfishPlugin())
NVML = ConfigSpec.from_pb(n.schema_to_hcl(NVML_SCHEMA))
LABELS = ConfigSpec({"labels": ConfigField("labels", "map(number)"), "extra": ConfigField("extra", "any")})


def redfish_config(raw: dict[str, Any]) -> RedfishSettings:
    """What the Redfish plugin does with a config: decode with its spec, then take the settings."""
    return settings_from(
        {k: v for k, v in decode_config(REDFISH, raw).items() if v is not None}, RedfishSettings()
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"read_timeout": math.nan}, "config: read_timeout: must be a finite number, got nan"),
        ({"read_timeout": math.inf}, "config: read_timeout: must be a finite number, got inf"),
        ({"connect_timeout": -math.inf}, "config: connect_timeout: must be a finite number, got -inf"),
        ({"read_timeout": "nan"}, "config: read_timeout: must be a finite number, got 'nan'"),
        ({"read_timeout": "1e400"}, "config: read_timeout: must be a finite number, got '1e400'"),
        ({"read_timeout": 1e300}, "config: read_timeout must be within 0..31536000, got 1e+300"),
        ({"concurrency": math.nan}, "config: concurrency: must be a finite number, got nan"),
        ({"concurrency": math.inf}, "config: concurrency: must be a finite number, got inf"),
        ({"concurrency": 1e300}, "config: concurrency must be within 1..2147483647, got 1e+300"),
        ({"concurrency": 2.5}, "config: concurrency must be a whole number, got 2.5"),
        ({"min_cap_watts": 1e12}, "config: min_cap_watts must be within 0..10000000, got 1000000000000"),
    ],
)
def test_redfish_plugin_config_numbers(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        redfish_config(raw)
    assert info.value.message == message


def test_a_nan_option_never_reaches_a_bmc_connection() -> None:
    """The inventory refuses it at start; a device's options reaching the plugin anyway are refused
    per request with one line, never a NaN deadline in the event loop."""
    endpoint = Endpoint(url="https://10.0.0.1", options={"read_timeout": math.nan})
    with pytest.raises(
        InvalidRequestError, match=r"^https://10\.0\.0\.1: bad Redfish option: read_timeout must"
    ):
        ConnectionSettings.from_endpoint(endpoint, RedfishSettings())
    plain = Endpoint(url="http://10.0.0.1")
    with pytest.raises(
        InvalidRequestError, match=r"^http://10\.0\.0\.1: a BMC is reached over https:// only"
    ):
        ConnectionSettings.from_endpoint(plain, RedfishSettings())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"stream_timeout": math.nan}, "config: stream_timeout: must be a finite number, got nan"),
        ({"stream_timeout": 1e300}, "config: stream_timeout must be within 0..31536000, got 1e+300"),
        ({"fingerprint_period": "99999999999h"}, "config: fingerprint_period must be within 0..31536000"),
    ],
)
def test_nvml_plugin_config_numbers(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        PluginConfig.parse({k: v for k, v in decode_config(NVML, raw).items() if v is not None})
    assert info.value.message.startswith(message)


def test_filedevices_list_period_numbers(tmp_path: Path) -> None:
    plugin = FileDevicesPlugin()
    for bad in (math.nan, math.inf, 1e300):
        with pytest.raises(InvalidRequestError, match=r"^list_period must be"):
            plugin.set_config({"dir": str(tmp_path), "list_period": bad})


def test_a_plugin_table_in_toml_with_nan_is_refused_on_the_host() -> None:
    """`[[plugin]] config = { read_timeout = nan }`: TOML has nan and inf literals."""
    raw = tomllib.loads('[[plugin]]\nname = "redfish"\nconfig = { read_timeout = nan, concurrency = inf }\n')
    with pytest.raises(InvalidRequestError, match=r"^config: concurrency: must be a finite number, got inf$"):
        decode_config(REDFISH, raw["plugin"][0]["config"])


def test_map_keys_and_any_values_are_checked() -> None:
    with pytest.raises(InvalidRequestError, match=r"^config: labels: keys must be strings, got number 1$"):
        decode_config(LABELS, {"labels": {1: 2, "a": 3}})
    with pytest.raises(InvalidRequestError, match=r"^config: labels\.a: must be a finite number, got nan$"):
        decode_config(LABELS, {"labels": {"a": math.nan}})
    with pytest.raises(
        InvalidRequestError, match=r"^config: extra\.x\[1\]: must be a finite number, got inf$"
    ):
        decode_config(LABELS, {"extra": {"x": [1, math.inf]}})
    with pytest.raises(InvalidRequestError, match=r"^config: extra: keys must be strings, got boolean True$"):
        decode_config(LABELS, {"extra": {True: 1}})
    assert decode_config(LABELS, {"labels": {"b": 1, "a": 2.5}}) == {
        "labels": {"a": 2.5, "b": 1},
        "extra": None,
    }


def test_bytes_in_an_any_value_are_one_typed_line() -> None:
    """msgpack's bin type arrives as bytes: cty's `any` holds no such thing (a raw TypeError before,
    from sorting a `set(any)` through JSON)."""
    spec = ConfigSpec({"tags": ConfigField("tags", "set(any)"), "extra": ConfigField("extra", "any")})
    for raw, where in (
        ({"tags": [b"\x00x", "a"]}, r"tags\[0\]"),
        ({"tags": ["a", {"k": bytearray(b"1")}]}, r"tags\[1\]\.k"),
        ({"extra": {"blob": b"x"}}, r"extra\.blob"),
    ):
        with pytest.raises(
            InvalidRequestError,
            match=rf"^config: {where}: expected a string, number, bool, list or map, got bytes$",
        ):
            decode_config(spec, raw)
    wire = msgpack.packb({"tags": [b"x"]}, use_bin_type=True)
    with pytest.raises(InvalidRequestError, match=r"^config: tags\[0\]: expected .* got bytes$"):
        decode_config(spec, msgpack.unpackb(wire))
    assert decode_config(spec, {"tags": ["b", "a", "b"]})["tags"] == ["a", "b"]


#: fixmap of one entry whose key is the array [1, 2]: Python cannot hash it (a TypeError before)
LIST_KEY = b"\x81\x92\x01\x02\x01"


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (LIST_KEY, "config is not valid msgpack"),
        (b"\x81\xa1", "config is not valid msgpack"),  # cut short
        (b"\xc1", "config is not valid msgpack"),  # a reserved byte
        (msgpack.packb({1: "x", "a": "y"}), "config: unsupported argument(s) 1, a"),
    ],
)
def test_broken_msgpack_is_one_clear_line(wire: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        unpack_config(REDFISH, wire)
    assert info.value.message.startswith(message) and "\n" not in info.value.message


# ---- over the plugin's real gRPC server, as a Nomad client sends it ----------------------------


@pytest.fixture(scope="module")
def redfish_plugin() -> Iterator[Launched]:
    plugin = Launched("redfish")
    yield plugin
    if plugin.proc.poll() is None:
        plugin.proc.kill()
        plugin.proc.wait()


def set_config(plugin: Launched, wire: bytes) -> None:
    request = nc.msg(nc.BASE, "SetConfigRequest", msgpack_config=wire, plugin_api_version=nc.DEVICE_API)
    nc.unary(plugin.channel, f"{BP}/SetConfig", request, f"{nc.BASE}.SetConfigResponse")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"read_timeout": math.nan}, "config: read_timeout: must be a finite number, got nan"),
        ({"read_timeout": "nan"}, "config: read_timeout: must be a finite number, got 'nan'"),
        ({"read_timeout": math.inf}, "config: read_timeout: must be a finite number, got inf"),
        ({"concurrency": math.nan}, "config: concurrency: must be a finite number, got nan"),
        ({"concurrency": math.inf}, "config: concurrency: must be a finite number, got inf"),
        ({"verify_after": -math.inf}, "config: verify_after: must be a finite number, got -inf"),
        ({"read_timeout": 1e300}, "config: read_timeout must be within 0..31536000, got 1e+300"),
        ({"concurrency": 10**30}, "config: concurrency must be within 1..2147483647"),
    ],
)
def test_set_config_over_grpc_refuses_non_finite_numbers(
    redfish_plugin: Launched, config: dict[str, Any], message: str
) -> None:
    wire = msgpack.packb(config) if not isinstance(config.get("concurrency"), int) else _big(config)
    with pytest.raises(grpc.RpcError) as err:
        set_config(redfish_plugin, wire)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(message), err.value.details()


def _big(config: dict[str, Any]) -> bytes:
    """msgpack cannot carry an integer over 64 bits; cty sends a huge whole number as a float64."""
    return msgpack.packb({k: float(v) for k, v in config.items()})


def test_set_config_over_grpc_refuses_mixed_keys_and_keeps_serving(redfish_plugin: Launched) -> None:
    for wire in (LIST_KEY, msgpack.packb({1: 2, "read_timeout": 5})):
        with pytest.raises(grpc.RpcError) as err:
            set_config(redfish_plugin, wire)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details()
    set_config(
        redfish_plugin, msgpack.packb({"read_timeout": 7.5, "concurrency": 3})
    )  # a good one still lands
    assert redfish_plugin.close() == 0


def test_an_event_loop_timer_is_never_given_a_nan_deadline() -> None:
    """Why it matters: one NaN deadline in asyncio's heap and a 0.1 s sleep never returns."""

    async def probe() -> float:
        started = time.monotonic()
        await asyncio.sleep(0.1)
        return time.monotonic() - started

    with pytest.raises(InvalidRequestError):
        redfish_config({"read_timeout": math.nan})
    assert asyncio.run(asyncio.wait_for(probe(), 5)) < 5


# ---- property: every config value decodes, or is one clear error --------------------------------

_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "NaN", "3", "2.5", "x"]),
)
_leaf = st.one_of(st.none(), st.booleans(), _number, st.text(max_size=8))
_value = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.booleans()), inner, max_size=3),
    ),
    max_leaves=8,
)
_names = st.sampled_from([*REDFISH.fields, *NVML.fields, "bogus"])


def _finite_everywhere(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _finite_everywhere(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_finite_everywhere(v) for v in value)
    return True


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_names, _value, max_size=4))
def test_config_decoders_take_anything_and_answer_one_clear_line(raw: dict[str, Any]) -> None:
    for spec, apply in ((REDFISH, lambda c: settings_from(c, RedfishSettings())), (NVML, PluginConfig.parse)):
        for decoded in _decoded(spec, raw):
            assert _finite_everywhere(decoded)
            try:
                apply({k: v for k, v in decoded.items() if v is not None})
            except InvalidRequestError as exc:
                assert exc.message and "\n" not in exc.message


def _decoded(spec: ConfigSpec, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The config decoded from the raw value and from its msgpack; [] when either refuses it."""
    out = []
    try:
        out.append(decode_config(spec, raw))
    except InvalidRequestError as exc:
        assert exc.message.startswith("config") and "\n" not in exc.message
    try:
        wire = msgpack.packb(raw)
    except (OverflowError, ValueError, TypeError):
        return out  # not something msgpack can carry
    try:
        out.append(unpack_config(spec, wire))
    except InvalidRequestError as exc:
        assert exc.message.startswith("config") and "\n" not in exc.message
    return out
