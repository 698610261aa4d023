"""Numbers are finite and in range on every path into the controller: the config file, the
environment, a `serve` flag, the inventory and a request over real gRPC, each refused with one
line naming the field (a NaN timeout passes every `<= 0` check and stalls the event loop)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller._proto.devicecontroller.v1 import policy_pb2 as pp
from controller.config import Settings, load_settings
from controller.inventory import check_inventory, load_inventory, plugin_registry
from controller.security.secrets import SecretStore
from tests.controller.api.test_service import R, gpu_caps
from tests.controller.cli.test_serve_and_send import devicectl

BAD_TOML = [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ('"nan"', "nan"), ("1e300", "1e+300")]
BAD_TEXT = [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("1e400", "inf"), ("1e300", "1e+300")]


@pytest.mark.parametrize(("toml", "shown"), BAD_TOML)
def test_a_config_file_number_must_be_finite_and_in_range(tmp_path: Path, toml: str, shown: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f"lease_ttl = {toml}\n")
    with pytest.raises(ValueError) as info:
        load_settings(str(config), env={})
    message = str(info.value)
    assert message.startswith(f"config file {config}: lease_ttl must be")
    assert message.endswith(f"got {shown}") and "\n" not in message


@pytest.mark.parametrize("text", ["nan", "inf", "1e300", "-1"])
def test_an_integer_setting_refuses_what_int_would_overflow_on(tmp_path: Path, text: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f"max_concurrency = {text}\n")
    with pytest.raises(ValueError, match=r"^config file .*: max_concurrency must be"):
        load_settings(str(config), env={})


@pytest.mark.parametrize(("text", "shown"), BAD_TEXT)
def test_an_environment_number_must_be_finite_and_in_range(text: str, shown: str) -> None:
    with pytest.raises(ValueError) as info:
        load_settings(env={"DEVICECTL_DELIVERY_TIMEOUT": text})
    assert str(info.value).startswith("environment DEVICECTL_DELIVERY_TIMEOUT: delivery_timeout must be")
    assert str(info.value).endswith(f"got {shown}")


def test_settings_made_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match="claim_interval must be a finite number, got nan"):
        Settings(claim_interval=float("nan"))
    assert Settings(claim_interval=0.5).claim_interval == 0.5  # an ordinary value still loads


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e300"])
def test_a_serve_flag_number_is_refused_in_one_line(tmp_path: Path, text: str) -> None:
    result = devicectl(
        "serve",
        "--database-url",
        f"sqlite:///{tmp_path}/x.db",
        "--device-call-timeout",
        text,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        "error: flag --device-call-timeout: device_call_timeout must be "
        + ("a finite number" if text != "1e300" else "within 0..31536000")
        + f", got {float(text)!r}"
    ]
    assert "Traceback" not in result.stderr + result.stdout


INVENTORY = '[[device]]\nid = "n1"\nplugin = "redfish"\nmodel = "DGX_GB200"\n[device.redfish]\n'


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("read_timeout = nan", "option read_timeout must be a finite number, got nan"),
        ("read_timeout = inf", "option read_timeout must be a finite number, got inf"),
        ("busy_backoff = -inf", "option busy_backoff must be a finite number, got -inf"),
        ("max_retry_wait = 1e300", "option max_retry_wait = 1e+300 is out of range (maximum 31536000"),
        ("min_cap_watts = 1e12", "option min_cap_watts = 1000000000000.0 is out of range (maximum"),
    ],
)
def test_an_inventory_option_must_be_finite_and_in_range(tmp_path: Path, option: str, message: str) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY + f'url = "https://10.0.0.1"\n{option}\n')
    entries = load_inventory(path)
    problems = check_inventory(entries, plugin_registry(entries, "redfish"), SecretStore(None))
    assert [p for p in problems if message in p], problems
    assert problems[0].startswith("device 'n1': ")


def test_inventory_check_and_serve_refuse_a_nan_timeout_as_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "inventory.toml"
    path.write_text(INVENTORY + 'url = "https://10.0.0.1"\nread_timeout = nan\n')
    check = devicectl("inventory", "check", "--inventory", str(path), check=False)
    assert check.returncode == 1 and "option read_timeout must be a finite number, got nan" in check.stdout
    assert "Traceback" not in check.stdout + check.stderr
    serve = devicectl(
        "serve", "--database-url", f"sqlite:///{tmp_path}/x.db", "--inventory", str(path), check=False
    )
    assert serve.returncode != 0 and "option read_timeout must be a finite number, got nan" in serve.stderr
    assert "Traceback" not in serve.stdout + serve.stderr


@pytest.mark.parametrize(
    ("watts", "message"),
    [
        (float("inf"), "must be a finite number >= 0, got inf"),
        (float("-inf"), "must be a finite number >= 0, got -inf"),
        (float("nan"), "must be a finite number >= 0, got nan"),
        (1e300, "must be at most 10000000, got 1e+300"),
    ],
)
async def test_a_request_watt_value_over_real_grpc(start_controller, watts: float, message: str) -> None:
    h = await start_controller()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await h.stub.SendDeviceRequest(gpu_caps("node000", "w", {0: watts}))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        f"gpu_policies_update.gpu_policies.policies[0].power_limit.watts: {message}"
    )


async def test_a_request_percentage_and_property_over_real_grpc(start_controller) -> None:
    h = await start_controller()
    policy = pp.PolicyObject(
        name="p",
        limits=[
            pp.PolicyLimit(element_type=pp.COMP_NODE, power_limit=pp.PowerLimit(percentage=float("nan")))
        ],
    )
    policy.properties.update({"period": float("inf")})
    request = R(
        device="node000",
        request_id="p",
        topology_activate=R.PolicySetRequest(policy_action=R.SET_POLICY, policy=policy),
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await h.stub.SendDeviceRequest(request)
    details = info.value.details()
    assert (
        "topology_activate.policy.limits[0].power_limit.percentage: must be a finite number >= 0, got nan"
        in (details)
    )
    assert "topology_activate.policy.properties.period: must be a finite number, got inf" in details


_NUMERIC = sorted(n for n, f in Settings.__dataclass_fields__.items() if f.type in ("int", "float"))
_text_value = st.sampled_from(["nan", "NaN", "inf", "-inf", "1e400", "1e300", "-1", "0", "2", "2.5", "", "x"])
_any_value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    _text_value,
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.dictionaries(st.sampled_from(_NUMERIC), _text_value, max_size=3),
    st.dictionaries(st.sampled_from(_NUMERIC), _any_value, max_size=3),
)
def test_settings_decoders_give_finite_numbers_or_one_line(
    env: dict[str, str], flags: dict[str, Any]
) -> None:
    try:
        loaded = load_settings(env={f"DEVICECTL_{k.upper()}": v for k, v in env.items()}, overrides=flags)
    except ValueError as exc:
        assert str(exc).startswith(("environment DEVICECTL_", "flag --")) and "\n" not in str(exc)
        return
    for name in _NUMERIC:
        value = getattr(loaded, name)
        if Settings.__dataclass_fields__[name].type == "int":
            assert type(value) is int and 0 <= value < 2**31, (name, value)
        else:
            assert type(value) is float and math.isfinite(value) and 0 <= value <= 365 * 86_400, (name, value)
