"""Domain results <-> DeviceControllerResponse: every kind, both ways."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.protobuf import any_pb2, struct_pb2, wrappers_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import metrics_pb2
from controller.translate import (
    ENERGY_UNIT,
    response_from_proto,
    response_kind,
    response_to_proto,
    success_of,
)
from controller.translate.kinds import translation_of, translations
from plugins.base import (
    AllocationResult,
    ComponentMetrics,
    ComponentResult,
    DeviceResult,
    ElementType,
    EntityModificationResult,
    EntityVerdict,
    GpuMetricsResult,
    GpuPoliciesResult,
    GpuProfileStatus,
    GpuResult,
    GpuUsage,
    HealthCheck,
    HealthResult,
    NodeMetrics,
    Outcome,
    PingResult,
    Policy,
    PolicyLimit,
    PowerLimit,
    ProfileResult,
    RawMetricsResult,
    RequestKind,
    StdMetricsResult,
)

K = RequestKind
Resp = pb.DeviceControllerResponse

POLICY = Policy(
    "Node-Med",
    (
        PolicyLimit(ElementType.NODE, PowerLimit(watts=7140)),
        PolicyLimit(ElementType.GPU, PowerLimit(percent=70)),
    ),
    {"source": "topology", "version": 3},
)
GPUS = GpuPoliciesResult(
    resource_group="rg-1",
    results=(
        GpuResult(0, True, applied_watts=500),
        GpuResult(1, True, applied_watts=650, requested_watts=700),
        GpuResult(2, True, applied_watts=650.5, requested_watts=700.25, message="clamped to device max"),
        GpuResult(3, False, message="GPU fell off the bus"),
        GpuResult(4, True, applied_watts=300, requested_watts=None, message="requested 1 W, applied 2 W"),
    ),
)
PROFILES = ProfileResult(
    ok=True,
    gpus=(GpuProfileStatus("0", True, (4, 7)), GpuProfileStatus("1", False, (), "profile 7 unsupported")),
    verification_id="ver-1",
)
FULL_ALLOCATION = AllocationResult(
    ok=True,
    resource_group="rg-1",
    policy=POLICY,
    power_cap_watts=7140,
    gpu_policies=GPUS,
    profiles=PROFILES,
    node=ComponentResult(True, applied_watts=7140),
    cpu=ComponentResult(True, applied_watts=650, requested_watts=700),
    memory=ComponentResult(False, message="memory capping unsupported"),
)
SAMPLED = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)
NODE = NodeMetrics(
    name="node001",
    power_watts=5234.5,
    gpus=tuple(ComponentMetrics(str(i), 700 + i, 1e9 + i, 1000, 200, 1200, 55.5) for i in range(4)),
    cpus=(ComponentMetrics("0", 300), ComponentMetrics("1", 310.25, temperature_celsius=61)),
    memory_units=8,
    sampled_at=SAMPLED,
)
DOCUMENTS: dict[str, Any] = {
    "/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics": {
        "PowerWatts": {"Reading": 5234.5},
        "Count": 4,
        "Sensors": [{"Id": "a", "Ok": True}, None],
    }
}

CASES: list[tuple[RequestKind, DeviceResult]] = [
    (K.RESOURCE_GROUP_ACTIVATE, FULL_ALLOCATION),
    (K.RESOURCE_GROUP_ACTIVATE, AllocationResult(ok=True)),
    (
        K.RESOURCE_GROUP_UPDATE,
        AllocationResult(ok=True, gpu_policies=GpuPoliciesResult(), profiles=ProfileResult(True)),
    ),
    (K.RESOURCE_GROUP_DEACTIVATE, AllocationResult(ok=False, error="BMC refused", resource_group="rg-1")),
    (
        K.TOPOLOGY_ACTIVATE,
        AllocationResult(ok=True, policy=POLICY, power_cap_watts=7140, node=ComponentResult(True)),
    ),
    (K.TOPOLOGY_DEACTIVATE, AllocationResult(ok=True, policy=Policy("idle"), power_cap_watts=1000)),
    (K.GPU_POLICIES_UPDATE, GPUS),
    (K.GPU_POLICIES_UPDATE, GpuPoliciesResult()),
    (K.ENABLE_WORKLOAD_PROFILE, PROFILES),
    (K.DISABLE_WORKLOAD_PROFILE, ProfileResult(ok=False, error="WPPS not supported")),
    (K.UPDATE_WORKLOAD_PROFILE, ProfileResult(ok=True)),
    (K.PING, PingResult(ok=True)),
    (K.PING, PingResult(ok=False, error="connection refused")),
    (K.GPU_METRICS, GpuMetricsResult(ok=True, metrics=(GpuUsage(0, 612.5), GpuUsage(3, 0)))),
    (K.GPU_METRICS, GpuMetricsResult(ok=False, error="timeout")),
    (K.RAW_METRICS, RawMetricsResult(ok=True, documents=DOCUMENTS)),
    (K.RAW_METRICS, RawMetricsResult(ok=True)),
    (K.RAW_METRICS, RawMetricsResult(ok=False, error="503")),
    (K.STD_METRICS, StdMetricsResult(ok=True, metrics=NODE)),
    (K.STD_METRICS, StdMetricsResult(ok=True, metrics=NodeMetrics("bare"))),
    (K.STD_METRICS, StdMetricsResult(ok=False, error="unreachable")),
    (K.MODIFY_ENTITY_MODEL, EntityModificationResult(EntityVerdict.ACCEPTED)),
    (
        K.MODIFY_ENTITY_MODEL,
        EntityModificationResult(EntityVerdict.ACCEPTED_CALL_PHASE_1, "switch after commit"),
    ),
    (K.MODIFY_ENTITY_MODEL, EntityModificationResult(EntityVerdict.REJECTED, "unknown model")),
    (
        K.BMC_HEALTH,
        HealthResult(
            (
                HealthCheck("tls", "pass", "verified", {"days_left": 30.5}),
                HealthCheck("write node", "fail", "step set"),
            )
        ),
    ),
    (K.BMC_HEALTH, HealthResult((), failure="https://bmc: cannot connect")),
]


def _send(kind: RequestKind, result: Any, **kwargs: Any) -> pb.DeviceControllerResponse:
    return response_to_proto(kind, result, device="node001", request_id="req-1", trace_id="t-1", **kwargs)


def test_every_kind_is_covered() -> None:
    assert {kind for kind, _ in CASES} == set(RequestKind)
    assert {t.name for t in translations()} == set(RequestKind)
    assert all(isinstance(result, translation_of(kind).kind.result) for kind, result in CASES)


@pytest.mark.parametrize(("kind", "result"), CASES, ids=[f"{k.value}-{i}" for i, (k, _) in enumerate(CASES)])
def test_round_trip(kind: RequestKind, result: DeviceResult) -> None:
    msg = _send(kind, result)
    assert msg.WhichOneof("response") == kind.value
    assert response_kind(msg) is kind
    assert response_from_proto(msg) == (kind, result)
    assert response_from_proto(Resp.FromString(msg.SerializeToString())) == (kind, result)


def test_envelope_keeps_state_when_none() -> None:
    msg = _send(K.PING, PingResult(True))
    assert (msg.device, msg.request_id, msg.trace_id) == ("node001", "req-1", "t-1")
    assert msg.device_state_json == b""
    assert not msg.HasField("device_ping_time")
    assert msg.device_ping_error == ""


def test_envelope_state_and_ping() -> None:
    reached = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    msg = _send(
        K.PING, PingResult(False, "no route"), state_json=b'{"a":1}', ping_time=reached, ping_error="no route"
    )
    assert msg.device_state_json == b'{"a":1}'
    assert msg.device_ping_time.ToDatetime(tzinfo=UTC) == reached
    assert msg.device_ping_error == "no route"


def test_outcome_supplies_state_and_reachability() -> None:
    reached = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    outcome = Outcome(
        PingResult(True), state={"session": "/s/1", "caps": []}, reached_at=reached, reach_error="slow"
    )
    msg = _send(K.PING, outcome)
    assert msg.device_state_json == b'{"session":"/s/1","caps":[]}'
    assert msg.device_ping_time.ToDatetime(tzinfo=UTC) == reached
    assert msg.device_ping_error == "slow"
    # explicit arguments win over the Outcome
    msg = _send(K.PING, outcome, state_json=b"{}", ping_error="")
    assert msg.device_state_json == b"{}"
    # an Outcome without state keeps the stored one; an empty state replaces it
    assert _send(K.PING, Outcome(PingResult(True))).device_state_json == b""
    assert _send(K.PING, Outcome(PingResult(True), state={})).device_state_json == b"{}"


def test_component_results_carry_applied_watts_and_mention_requested() -> None:
    msg = _send(K.TOPOLOGY_ACTIVATE, FULL_ALLOCATION)
    member = msg.topology_activate
    assert member.allocated_cpu_policy.power_cap_watts == 650
    assert member.allocated_cpu_policy.diag_msg == "requested 700 W, applied 650 W"
    assert member.allocated_node_policy.diag_msg == ""
    assert member.HasField("allocated_memory_policy")
    assert member.allocated_memory_policy.diag_msg == "memory capping unsupported"
    gpu = member.allocated_gpu_policies.results[2]
    assert gpu.diag_msg == "clamped to device max (requested 700.25 W, applied 650.5 W)"
    assert gpu.power_cap_watts == 650.5


def test_requested_equal_to_applied_is_not_mentioned() -> None:
    msg = _send(K.GPU_POLICIES_UPDATE, GpuPoliciesResult(results=(GpuResult(0, True, 500, 500, "ok"),)))
    assert msg.gpu_policies_update.results[0].diag_msg == "ok"
    # the wire cannot tell "requested the same" from "not said": it comes back as None
    _, result = response_from_proto(msg)
    assert result == GpuPoliciesResult(results=(GpuResult(0, True, 500, None, "ok"),))


def test_absent_parts_stay_absent() -> None:
    member = _send(K.RESOURCE_GROUP_ACTIVATE, AllocationResult(ok=True)).resource_group_activate
    for name in (
        "policy",
        "allocated_gpu_policies",
        "workload_profile_result",
        "allocated_node_policy",
        "allocated_cpu_policy",
        "allocated_memory_policy",
    ):
        assert not member.HasField(name), name


def test_raw_metrics_are_a_struct_in_an_any() -> None:
    msg = _send(K.RAW_METRICS, RawMetricsResult(ok=True, documents=DOCUMENTS))
    packed = msg.raw_metrics.raw_metrics
    assert packed.type_url == "type.googleapis.com/google.protobuf.Struct"
    struct = struct_pb2.Struct()
    assert packed.Unpack(struct)
    reading = struct["/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"]["PowerWatts"]["Reading"]
    assert reading == 5234.5
    # counts come back as ints, as they went in
    _, result = response_from_proto(msg)
    assert isinstance(result, RawMetricsResult)
    assert isinstance(result.documents["/redfish/v1/Chassis/Chassis_0/EnvironmentMetrics"]["Count"], int)


def test_raw_metrics_of_another_type_stay_readable() -> None:
    other = any_pb2.Any()
    other.Pack(wrappers_pb2.StringValue(value="x"))
    msg = Resp(raw_metrics=Resp.RawMetricsResponse(success=True, raw_metrics=other))
    _, result = response_from_proto(msg)
    assert isinstance(result, RawMetricsResult)
    assert result.documents["@type"] == "type.googleapis.com/google.protobuf.StringValue"


def test_raw_metrics_corrupt_struct_is_a_value_error() -> None:
    packed = any_pb2.Any(type_url="type.googleapis.com/google.protobuf.Struct", value=b"\n\x05\n\x01\xff")
    msg = Resp(raw_metrics=Resp.RawMetricsResponse(success=True, raw_metrics=packed))
    with pytest.raises(ValueError, match=r"raw_metrics\.raw_metrics: packed Struct does not parse"):
        response_from_proto(msg)


def test_raw_metrics_must_be_json() -> None:
    with pytest.raises(ValueError, match="raw_metrics"):
        _send(K.RAW_METRICS, RawMetricsResult(ok=True, documents={"x": float("nan")}))


def test_std_metrics_shape() -> None:
    metrics = _send(K.STD_METRICS, StdMetricsResult(ok=True, metrics=NODE)).std_metrics.metrics
    assert (metrics.num_gpus, metrics.num_cpus, metrics.num_memory_units) == (4, 2, 8)
    assert {gpu.energy_usage_unit for gpu in metrics.gpus} == {ENERGY_UNIT} == {"Joules"}
    assert metrics.gpus[1].set_limit == 1000 and metrics.gpus[1].max_limit == 1200
    assert metrics.sampled_at.ToDatetime(tzinfo=UTC) == SAMPLED


def test_std_metrics_other_energy_units_are_converted() -> None:
    msg = Resp(
        std_metrics=Resp.StdMetricsResponse(
            success=True,
            metrics=metrics_pb2.NodeMetricsResponse(
                name="n", gpus=[metrics_pb2.DeviceMetrics(id="0", energy_usage=2, energy_usage_unit="kWh")]
            ),
        )
    )
    _, result = response_from_proto(msg)
    assert isinstance(result, StdMetricsResult) and result.metrics is not None
    assert result.metrics.gpus[0].energy_joules == 7.2e6
    msg.std_metrics.metrics.gpus[0].energy_usage_unit = "furlongs"
    with pytest.raises(ValueError, match=r"std_metrics\.metrics\.gpus\[0\]\.energy_usage_unit"):
        response_from_proto(msg)


def test_sampled_at_naive_and_other_zones() -> None:
    naive = NodeMetrics("n", sampled_at=datetime(2026, 3, 1, 12, 0))
    _, result = response_from_proto(_send(K.STD_METRICS, StdMetricsResult(True, metrics=naive)))
    assert isinstance(result, StdMetricsResult) and result.metrics is not None
    assert result.metrics.sampled_at == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # naive means UTC
    plus_two = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    _, result = response_from_proto(
        _send(K.STD_METRICS, StdMetricsResult(True, metrics=NodeMetrics("n", sampled_at=plus_two)))
    )
    assert isinstance(result, StdMetricsResult) and result.metrics is not None
    assert result.metrics.sampled_at == plus_two


def test_entity_verdicts() -> None:
    member = _send(
        K.MODIFY_ENTITY_MODEL, EntityModificationResult(EntityVerdict.REJECTED, "no")
    ).modify_entity_model
    assert member.response == Resp.EntityModificationResponse.REJECTED
    assert member.diag_msg == "no"
    with pytest.raises(ValueError, match=r"modify_entity_model\.response"):
        response_from_proto(Resp(modify_entity_model=Resp.EntityModificationResponse()))


def test_kind_and_type_must_agree() -> None:
    with pytest.raises(TypeError, match="gpu_policies_update answers with GpuPoliciesResult"):
        _send(K.GPU_POLICIES_UPDATE, PingResult(True))
    with pytest.raises(TypeError):
        _send(K.PING, Outcome(ProfileResult(True)))


def test_no_member() -> None:
    with pytest.raises(ValueError, match="response: no response kind set"):
        response_from_proto(Resp(device="d"))
    assert success_of(Resp(device="d")) == (False, "response: no response kind set")


@pytest.mark.parametrize(("kind", "result"), CASES, ids=[f"{k.value}-{i}" for i, (k, _) in enumerate(CASES)])
def test_success_of_matches_the_result(kind: RequestKind, result: DeviceResult) -> None:
    ok, error = success_of(_send(kind, result))
    if isinstance(result, GpuPoliciesResult):
        assert ok == all(item.ok for item in result.results)
    elif isinstance(result, EntityModificationResult):
        assert ok == (result.verdict is not EntityVerdict.REJECTED)
    else:
        assert ok == result.ok
        assert error == ("" if result.ok else result.error)
    assert (error == "") == ok
