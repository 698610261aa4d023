"""The out-of-process encodings: domain types ⇄ JSON and Nomad's messages, both directions."""

from __future__ import annotations

import enum
import json
from collections import OrderedDict
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest

from plugins.base import (
    Allocation,
    AllocationResult,
    Attribute,
    ComponentMetrics,
    ComponentResult,
    ContainerReservation,
    Device,
    DeviceGroup,
    DeviceGroupStats,
    DeviceLocality,
    DeviceNode,
    DevicePlugin,
    DeviceRejectedError,
    DeviceStats,
    DeviceUnreachableError,
    ElementType,
    FingerprintResponse,
    GpuPoliciesChange,
    GpuPolicy,
    HealthCheck,
    HealthQuery,
    HealthResult,
    InvalidRequestError,
    Mount,
    NodeMetrics,
    PendingVerification,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    RequestKind,
    StatObject,
    StatsResponse,
    StatValue,
    StdMetricsResult,
    codec,
)
from plugins.base import nomad as n
from plugins.base.codec import decode, encode, error_from
from plugins.base.kinds import KINDS

NOW = datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)
POLICY = Policy(
    "cap",
    (
        PolicyLimit(ElementType.NODE, PowerLimit(watts=5000.0)),
        PolicyLimit(ElementType.GPU, PowerLimit(percent=80)),
    ),
    {"owner": "rg-1", "nested": {"a": [1, 2]}},
)


@pytest.mark.parametrize(
    "value",
    [
        Allocation(
            "rg",
            policy=PolicyChange(PolicyAction.SET, POLICY),
            gpu_policies=GpuPoliciesChange(
                "rg", PolicyAction.SET, POLICY, (GpuPolicy(0, PowerLimit(watts=700)), GpuPolicy(1, None))
            ),
            profiles=ProfileChange(enable=(3, 4), disable=(5,), verify=False),
        ),
        AllocationResult(
            True, policy=POLICY, power_cap_watts=5000.0, node=ComponentResult(True, 4990.0, 5000.0)
        ),
        StdMetricsResult(
            True, metrics=NodeMetrics("n1", 123.5, gpus=(ComponentMetrics("0", 700.0),), sampled_at=NOW)
        ),
        PendingVerification("v1", 2.5, {"ids": [3]}, max_checks=3),
        HealthQuery(4, False, 250, 5000, inband_gpu_limits={0: 700.0}),
        HealthResult((HealthCheck("cap gpu/0", "warn", "no range", {"min": None, "modes": ["Automatic"]}),)),
    ],
)
def test_domain_values_round_trip(value: object) -> None:
    assert decode(type(value), encode(value)) == value


def test_every_named_request_kind_has_one_row_and_coroutine() -> None:
    assert list(KINDS.names()) == list(RequestKind)  # the built-in rows, in the enum's order
    assert len({k.method for k in KINDS}) == len(KINDS)
    assert all(callable(getattr(DevicePlugin, k.method, None)) for k in KINDS)


def test_bad_shapes_name_the_field() -> None:
    with pytest.raises(InvalidRequestError, match=r"request.action: 'sideways' is not a valid"):
        decode(PolicyChange, {"action": "sideways"}, "request")
    with pytest.raises(InvalidRequestError, match=r"x.enable\[1\]: expected int, got str"):
        decode(ProfileChange, {"enable": [3, "4"]}, "x")
    with pytest.raises(InvalidRequestError, match="expected an object"):
        decode(Allocation, [1], "r")


def test_errors_keep_their_class_and_retryable_flag() -> None:
    err = error_from("DEVICE_REJECTED", "BMC said no", False)
    assert isinstance(err, DeviceRejectedError) and str(err) == "BMC said no" and not err.retryable
    assert decode(FingerprintResponse, encode(FingerprintResponse(error=err))).error.code == "DEVICE_REJECTED"


def test_fingerprint_stats_and_reservation_round_trip_through_nomads_messages() -> None:
    group = DeviceGroup(
        "nvidia",
        "gpu",
        "H100",
        (
            Device("GPU-1", True, locality=DeviceLocality("0000:17:00.0")),
            Device("GPU-2", False, "fell off the bus"),
        ),
        {
            "memory": Attribute(81559, "MiB"),
            "tdp": Attribute(700.5, "W"),
            "mig": Attribute(False),
            "arch": Attribute("hopper"),
        },
    )
    assert n.groups_from_pb(n.groups_to_pb((group,))) == FingerprintResponse(groups=(group,))
    value = StatValue(float_numerator=350.0, float_denominator=700.0, unit="W", desc="power")
    stats = DeviceGroupStats(
        "nvidia",
        "gpu",
        "H100",
        {
            "GPU-1": DeviceStats(
                value,
                StatObject(
                    {"mem": StatObject(attributes={"used": StatValue(int_numerator=5)})},
                    {"power": value, "ok": StatValue(boolean=True)},
                ),
                NOW,
            )
        },
    )
    assert n.stats_from_pb(n.stats_to_pb((stats,))) == StatsResponse(groups=(stats,))
    res = ContainerReservation(
        {"A": "1"}, (Mount("/t", "/h", False),), (DeviceNode("/dev/x", "/dev/y", "r"),)
    )
    assert n.reservation_from_pb(n.reservation_to_pb(res)) == res


def test_a_json_schema_becomes_nomads_hcl_object_spec() -> None:
    spec = n.schema_to_hcl(
        {
            "type": "object",
            "properties": {"dir": {"type": "string"}, "ids": {"type": "array", "items": {"type": "integer"}}},
            "required": ["dir"],
        }
    )
    assert n.hcl_to_rows(spec) == [
        {"name": "dir", "type": "string", "required": True, "default": ""},
        {"name": "ids", "type": "list(number)", "required": False, "default": ""},
    ]


async def test_an_error_brings_the_plugins_receipts_back_and_the_write_log_keeps_them() -> None:
    """A plugin process that wrote and then failed answers its error with every write's receipt
    ("[]": none was made); an error without them (an older plugin, a transport failure) has None,
    so the controller records the writes asked for as unknown."""
    from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
    from plugins.base import DeviceContext, DevicePlugin, PluginInfo, RequestKind, WriteLog, run_operation
    from plugins.base.kinds import kind_of
    from plugins.base.receipts import DeviceWrite
    from plugins.base.wire import error_to_pb, outcome_from_pb

    rpc = kind_of("bmc_health")
    sent = DeviceWrite("/redfish/v1/gpu0", "PATCH", {"SetPoint": 900}, "gpu/0", 1200.0, None, "unknown: x")
    answered = ppb.OperationResponse(
        error=error_to_pb(DeviceRejectedError("BMC said no")), writes_json=json.dumps(encode([sent]))
    )
    with pytest.raises(DeviceRejectedError) as raised:
        outcome_from_pb(rpc, answered)
    assert raised.value.receipts == (sent,)
    none_made = ppb.OperationResponse(error=error_to_pb(DeviceRejectedError("no")), writes_json="[]")
    with pytest.raises(DeviceRejectedError) as raised:
        outcome_from_pb(rpc, none_made)
    assert raised.value.receipts == ()
    with pytest.raises(DeviceRejectedError) as raised:
        outcome_from_pb(rpc, ppb.OperationResponse(error=error_to_pb(DeviceRejectedError("no"))))
    assert raised.value.receipts is None

    class Failing(DevicePlugin):
        info = PluginInfo(name="failing", version="")
        writes_in_process = False

        async def bmc_health(self, ctx: DeviceContext, req: HealthQuery) -> Any:
            outcome_from_pb(rpc, answered)

    log = WriteLog()
    ctx = DeviceContext(device_id="n1")
    with pytest.raises(DeviceRejectedError):
        await run_operation(Failing(), RequestKind.BMC_HEALTH, ctx, HealthQuery(), log)
    assert log.entries() == (sent,)


@pytest.mark.parametrize(
    "reply",
    [
        {"result_json": "{not json"},
        {"result_json": '{"ok": NaN}'},
        {"result_json": '{"ok": true}', "writes_json": '[{"target": "/x", "method": "PATCH", "after": NaN}]'},
        {"result_json": '{"ok": true}', "writes_json": '{"not": "a list"}'},
        {"result_json": '{"ok": true}', "has_state": True, "state_json": "[1]"},
        {"result_json": '{"ok": true}', "verification_json": '{"id": 3}'},
    ],
)
def test_an_unreadable_plugin_reply_is_the_plugins_error_with_its_writes_unknown(
    reply: dict[str, Any],
) -> None:
    """A plugin process's reply is outside input: a document that is not JSON, holds NaN, or has
    the wrong shape is neither taken nor blamed on the request (InvalidRequestError); it is the
    plugin's error, and with no receipts, so each write asked for counts as one that may have landed."""
    from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
    from plugins.base import DeviceControllerError
    from plugins.base.kinds import kind_of
    from plugins.base.wire import outcome_from_pb

    with pytest.raises(DeviceControllerError, match="reply is unreadable") as raised:
        outcome_from_pb(kind_of("ping"), ppb.OperationResponse(**reply))
    assert type(raised.value) is DeviceControllerError and raised.value.receipts is None


def test_an_error_with_unreadable_receipts_keeps_its_class_and_its_writes_unknown() -> None:
    from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
    from plugins.base.kinds import kind_of
    from plugins.base.wire import error_to_pb, outcome_from_pb

    for bad in ("[{", '[{"target": "/x", "method": "PATCH", "before": Infinity}]', '"x"'):
        answered = ppb.OperationResponse(
            error=error_to_pb(DeviceRejectedError("BMC said no")), writes_json=bad
        )
        with pytest.raises(DeviceRejectedError, match="BMC said no") as raised:
            outcome_from_pb(kind_of("bmc_health"), answered)
        assert raised.value.receipts is None


def test_json_values_are_encoded_by_their_exact_type_as_the_generic_chain_encodes_them() -> None:
    """JSON's own types are told by their exact type first; what they give is the generic chain's,
    and a subclass of any of them (an int enum, an ordered dict, a list subclass) still goes that way."""

    class Level(enum.IntEnum):
        LOW = 1

    class Items(list[int]):
        pass

    values: list[object] = [
        None, True, 0, 1.5, "s", {"PowerLimitWatts": {"SetPoint": 700}}, [1, (2, "x")], (), {},
        {1: [None, {"a": (True, 2.0)}]}, Level.LOW, OrderedDict(a=Level.LOW), Items([1]),
        MappingProxyType({"k": [NOW]}), {"t": ElementType.GPU, "e": DeviceUnreachableError("x")},
        POLICY, [POLICY, {"p": POLICY}],
    ]  # fmt: skip
    for value in values:
        fast, chain = encode(value), codec._encode(value)
        assert fast == chain and _types(fast) == _types(chain), value
    assert encode(Level.LOW) is Level.LOW  # an int subclass is returned as it is, as before
    with pytest.raises(TypeError, match="cannot encode set"):
        encode({"a": {1}})


def _types(value: object) -> object:
    if isinstance(value, dict):
        return (type(value), [(type(k), k, _types(v)) for k, v in value.items()])
    if isinstance(value, list):
        return (type(value), [_types(v) for v in value])
    return type(value)
