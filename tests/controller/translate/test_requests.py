"""DeviceControllerRequest <-> domain requests: every kind, both ways, exactly."""

from __future__ import annotations

import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.validate import validate_request
from controller.translate import request_from_proto, request_kind, request_to_proto
from controller.translate.kinds import translation_of, translations
from plugins.base import (
    Allocation,
    DeviceRequest,
    ElementType,
    Empty,
    EntityModification,
    GpuMetricsQuery,
    GpuPoliciesChange,
    GpuPolicy,
    HealthQuery,
    InvalidRequestError,
    Ping,
    Policy,
    PolicyAction,
    PolicyChange,
    PolicyLimit,
    PowerLimit,
    ProfileChange,
    RequestKind,
)

K = RequestKind
Req = pb.DeviceControllerRequest

NODE_HIGH = Policy(
    name="Node-High",
    limits=(
        PolicyLimit(ElementType.NODE, PowerLimit(watts=10200)),
        PolicyLimit(ElementType.GPU, PowerLimit(watts=7650.5)),
        PolicyLimit(ElementType.CPU, PowerLimit(percent=80)),
        PolicyLimit(ElementType.MEMORY, PowerLimit(percent=12.5)),
    ),
    properties={
        "owner": "ops",
        "tier": 2,
        "ratio": 0.25,
        "flags": [True, None, "x"],
        "nested": {"a": {"b": []}},
    },
)
BARE_POLICY = Policy(name="bare")
GPU_SET = GpuPoliciesChange(
    resource_group="rg-1",
    action=PolicyAction.SET,
    current_policy=NODE_HIGH,
    policies=(
        GpuPolicy(0, PowerLimit(watts=500)),
        GpuPolicy(1, None),  # removal of the GPU-specific policy
        GpuPolicy(3, PowerLimit(percent=90)),
    ),
)
GPU_RESET = GpuPoliciesChange(resource_group="rg-1", action=PolicyAction.UNSET)
PROFILES = ProfileChange(enable=(4, 7), disable=(5,), verify=False)
ENTITY = EntityModification(
    phase=1,
    old_model={"Name": "node001", "Model": "DGX_H100", "Redfish": {"URL": "https://bmc"}},
    new_model={"Name": "node001", "Model": "DGX_B200", "n": 4},
    old_default_policy=BARE_POLICY,
    new_default_policy=NODE_HIGH,
    resource_group="rg-9",
)

#: (kind, request) pairs: every kind at least once, optional parts both absent and present
CASES: list[tuple[RequestKind, DeviceRequest]] = [
    (K.RESOURCE_GROUP_ACTIVATE, Allocation("rg-1")),
    (
        K.RESOURCE_GROUP_ACTIVATE,
        Allocation("rg-1", PolicyChange(PolicyAction.SET, NODE_HIGH), GPU_SET, PROFILES),
    ),
    (K.RESOURCE_GROUP_UPDATE, Allocation("rg-1", gpu_policies=GPU_SET)),
    (K.RESOURCE_GROUP_UPDATE, Allocation("rg-1", profiles=ProfileChange())),  # present but empty
    (K.RESOURCE_GROUP_DEACTIVATE, Allocation("rg-1", PolicyChange(PolicyAction.UNSET), GPU_RESET)),
    (K.TOPOLOGY_ACTIVATE, PolicyChange(PolicyAction.SET, NODE_HIGH)),
    (K.TOPOLOGY_ACTIVATE, PolicyChange(PolicyAction.SET, BARE_POLICY)),
    (K.TOPOLOGY_DEACTIVATE, PolicyChange(PolicyAction.UNSET)),
    (K.TOPOLOGY_DEACTIVATE, PolicyChange(PolicyAction.UNSET, BARE_POLICY)),
    (K.GPU_POLICIES_UPDATE, GPU_SET),
    (K.GPU_POLICIES_UPDATE, GpuPoliciesChange("rg-2", PolicyAction.SET)),
    (K.GPU_POLICIES_UPDATE, GPU_RESET),
    (K.ENABLE_WORKLOAD_PROFILE, ProfileChange(enable=(3, 258))),
    (K.DISABLE_WORKLOAD_PROFILE, ProfileChange(disable=(10,))),
    (K.UPDATE_WORKLOAD_PROFILE, PROFILES),
    (K.UPDATE_WORKLOAD_PROFILE, ProfileChange()),
    (K.PING, Ping()),
    (K.PING, Ping(retry_count=3)),
    (K.GPU_METRICS, GpuMetricsQuery()),
    (K.GPU_METRICS, GpuMetricsQuery((0, 2, 7))),
    (K.RAW_METRICS, Empty()),
    (K.STD_METRICS, Empty()),
    (K.MODIFY_ENTITY_MODEL, ENTITY),
    (K.MODIFY_ENTITY_MODEL, EntityModification(phase=0, old_model={}, new_model={})),
    (K.BMC_HEALTH, HealthQuery()),
    (
        K.BMC_HEALTH,
        HealthQuery(4, skip_writes=False, telemetry_interval_ms=250, write_resolution_timeout_ms=5000),
    ),
]


def test_every_kind_is_covered() -> None:
    assert {kind for kind, _ in CASES} == set(RequestKind)
    assert {t.name for t in translations()} == set(RequestKind)
    assert all(isinstance(request, translation_of(kind).kind.request) for kind, request in CASES)


@pytest.mark.parametrize(
    ("kind", "request_"), CASES, ids=[f"{k.value}-{i}" for i, (k, _) in enumerate(CASES)]
)
def test_round_trip(kind: RequestKind, request_: DeviceRequest) -> None:
    msg = request_to_proto(kind, request_, device="node001", request_id="req-1")
    assert msg.WhichOneof("request") == kind.value
    validate_request(msg)  # what we build is always acceptable
    assert request_from_proto(msg) == (kind, request_)
    # and through the bytes on the wire
    assert request_from_proto(pb.DeviceControllerRequest.FromString(msg.SerializeToString())) == (
        kind,
        request_,
    )


def test_envelope_fields() -> None:
    msg = request_to_proto(
        K.PING,
        Ping(2),
        device="node001",
        request_id="req-1",
        timeout_seconds=45,
        trace_id="trace-9",
        device_model_json=b'{"Name":"node001"}',
        device_state_json=b'{"session":"x"}',
    )
    assert (msg.device, msg.request_id, msg.timeout_seconds, msg.trace_id) == (
        "node001",
        "req-1",
        45,
        "trace-9",
    )
    assert msg.device_model_json == b'{"Name":"node001"}'
    assert msg.device_state_json == b'{"session":"x"}'
    assert request_kind(msg) is K.PING


def test_optional_parts_use_presence() -> None:
    absent = request_to_proto(K.RESOURCE_GROUP_UPDATE, Allocation("rg"), device="d", request_id="r")
    part = absent.resource_group_update
    assert not part.HasField("policy")
    assert not part.HasField("gpu_policies")
    assert not part.HasField("workload_profiles")

    empty = request_to_proto(
        K.RESOURCE_GROUP_UPDATE, Allocation("rg", profiles=ProfileChange()), device="d", request_id="r"
    )
    assert empty.resource_group_update.HasField("workload_profiles")


def test_allocation_from_hand_built_message() -> None:
    msg = Req(
        device="d",
        request_id="r",
        resource_group_activate=Req.AllocationRequest(
            resource_group="rg",
            policy=Req.PolicySetRequest(
                policy_action=Req.SET_POLICY,
                policy=policy_pb2.PolicyObject(
                    name="p",
                    limits=[
                        policy_pb2.PolicyLimit(
                            element_type=policy_pb2.COMP_GPU, power_limit=policy_pb2.PowerLimit(percentage=55)
                        )
                    ],
                ),
            ),
        ),
    )
    kind, request = request_from_proto(msg)
    assert kind is K.RESOURCE_GROUP_ACTIVATE
    assert request == Allocation(
        "rg",
        PolicyChange(PolicyAction.SET, Policy("p", (PolicyLimit(ElementType.GPU, PowerLimit(percent=55)),))),
    )


def test_gpu_policy_without_power_limit_is_removal() -> None:
    msg = Req(
        device="d",
        request_id="r",
        gpu_policies_update=Req.GPUPoliciesSetRequest(
            gpu_policy_action=Req.SET_POLICY,
            gpu_policies=policy_pb2.GPUPolicies(
                policies=[
                    policy_pb2.GPUPolicy(gpu_id=2),
                    policy_pb2.GPUPolicy(gpu_id=3, power_limit=policy_pb2.PowerLimit(watts=0)),
                ]
            ),
        ),
    )
    _, request = request_from_proto(msg)
    assert isinstance(request, GpuPoliciesChange)
    assert request.policies == (GpuPolicy(2, None), GpuPolicy(3, PowerLimit(watts=0)))


def test_reset_ignores_gpu_policies() -> None:
    msg = Req(
        device="d",
        request_id="r",
        gpu_policies_update=Req.GPUPoliciesSetRequest(
            resource_group="rg",
            gpu_policy_action=Req.UNSET_POLICY,
            gpu_policies=policy_pb2.GPUPolicies(
                policies=[policy_pb2.GPUPolicy(gpu_id=1, power_limit=policy_pb2.PowerLimit(watts=-5))]
            ),
        ),
    )
    assert request_from_proto(msg) == (K.GPU_POLICIES_UPDATE, GpuPoliciesChange("rg", PolicyAction.UNSET))
    # and a reset is sent without them
    again = request_to_proto(
        K.GPU_POLICIES_UPDATE,
        GpuPoliciesChange("rg", PolicyAction.UNSET, policies=(GpuPolicy(1, None),)),
        device="d",
        request_id="r",
    )
    assert not again.gpu_policies_update.HasField("gpu_policies")


def test_profile_verify_is_inverse_of_disable_async_verification() -> None:
    msg = Req(
        device="d", request_id="r", enable_workload_profile=Req.PowerProfileRequest(enable_profile_ids=[4])
    )
    assert request_from_proto(msg) == (K.ENABLE_WORKLOAD_PROFILE, ProfileChange(enable=(4,), verify=True))
    msg.enable_workload_profile.disable_async_verification = True
    assert request_from_proto(msg)[1] == ProfileChange(enable=(4,), verify=False)


def test_struct_properties_become_plain_values() -> None:
    msg = request_to_proto(
        K.TOPOLOGY_ACTIVATE, PolicyChange(PolicyAction.SET, NODE_HIGH), device="d", request_id="r"
    )
    _, request = request_from_proto(msg)
    assert isinstance(request, PolicyChange) and request.policy is not None
    properties = request.policy.properties
    assert properties["tier"] == 2 and isinstance(properties["tier"], int)  # not 2.0
    assert properties["ratio"] == 0.25
    assert properties["flags"] == [True, None, "x"]


def test_entity_models_empty_bytes_mean_empty_object() -> None:
    msg = Req(device="d", request_id="r", modify_entity_model=Req.EntityModificationRequest(phase=0))
    assert request_from_proto(msg) == (K.MODIFY_ENTITY_MODEL, EntityModification(0, {}, {}))


def test_raw_and_std_metrics_are_empty() -> None:
    for kind in (K.RAW_METRICS, K.STD_METRICS):
        msg = Req(device="d", request_id="r")
        getattr(msg, kind.value).SetInParent()
        assert request_from_proto(msg) == (kind, Empty())


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (Req(device="d", request_id="r"), "request"),
        (Req(topology_activate=Req.PolicySetRequest()), "topology_activate.policy_action"),
        (
            Req(
                topology_activate=Req.PolicySetRequest(
                    policy_action=Req.SET_POLICY,
                    policy=policy_pb2.PolicyObject(
                        limits=[policy_pb2.PolicyLimit(element_type=policy_pb2.COMP_GPU)]
                    ),
                )
            ),
            "topology_activate.policy.limits[0].power_limit",
        ),
        (
            Req(
                topology_activate=Req.PolicySetRequest(
                    policy_action=Req.SET_POLICY,
                    policy=policy_pb2.PolicyObject(
                        limits=[policy_pb2.PolicyLimit(power_limit=policy_pb2.PowerLimit(watts=1))]
                    ),
                )
            ),
            "topology_activate.policy.limits[0].element_type",
        ),
        (
            Req(
                gpu_policies_update=Req.GPUPoliciesSetRequest(
                    gpu_policy_action=Req.SET_POLICY,
                    gpu_policies=policy_pb2.GPUPolicies(
                        policies=[policy_pb2.GPUPolicy(power_limit=policy_pb2.PowerLimit(watts=float("nan")))]
                    ),
                )
            ),
            "gpu_policies_update.gpu_policies.policies[0].power_limit.watts",
        ),
        (
            Req(modify_entity_model=Req.EntityModificationRequest(new_device_model=b"[1]")),
            "modify_entity_model.new_device_model",
        ),
    ],
)
def test_untranslatable_messages_name_the_field(msg: pb.DeviceControllerRequest, field: str) -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        request_from_proto(msg)
    assert excinfo.value.message.startswith(f"{field}:")


def test_kind_and_type_must_agree() -> None:
    with pytest.raises(TypeError, match="ping carries Ping"):
        request_to_proto(K.PING, Empty(), device="d", request_id="r")


def test_models_must_be_json() -> None:
    bad = EntityModification(phase=0, old_model={"x": object()}, new_model={})
    with pytest.raises(ValueError, match=r"old_model\.x"):
        request_to_proto(K.MODIFY_ENTITY_MODEL, bad, device="d", request_id="r")
