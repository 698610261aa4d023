"""validate_request: one case per rule, each message naming the offending proto field."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.json_fields import parse_json_object
from controller.api.validate import request_problems, validate_request
from controller.translate import request_from_proto
from plugins.base import InvalidRequestError, RequestKind

Req = pb.DeviceControllerRequest


def _policy(name: str = "Node-High") -> policy_pb2.PolicyObject:
    properties = struct_pb2.Struct()
    properties.update({"owner": "ops", "weights": [1, 2]})
    return policy_pb2.PolicyObject(
        name=name,
        limits=[
            policy_pb2.PolicyLimit(
                element_type=policy_pb2.COMP_NODE, power_limit=policy_pb2.PowerLimit(watts=10200)
            ),
            policy_pb2.PolicyLimit(
                element_type=policy_pb2.COMP_GPU, power_limit=policy_pb2.PowerLimit(percentage=100)
            ),
            policy_pb2.PolicyLimit(
                element_type=policy_pb2.COMP_CPU, power_limit=policy_pb2.PowerLimit(watts=0)
            ),
            policy_pb2.PolicyLimit(
                element_type=policy_pb2.COMP_MEMORY, power_limit=policy_pb2.PowerLimit(percentage=0)
            ),
        ],
        properties=properties,
    )


def _gpu_set() -> Req.GPUPoliciesSetRequest:
    return Req.GPUPoliciesSetRequest(
        resource_group="rg-1",
        gpu_policy_action=Req.SET_POLICY,
        current_policy=_policy(),
        gpu_policies=policy_pb2.GPUPolicies(
            policies=[
                policy_pb2.GPUPolicy(gpu_id=0, power_limit=policy_pb2.PowerLimit(watts=500)),
                policy_pb2.GPUPolicy(gpu_id=1, power_limit=policy_pb2.PowerLimit(percentage=50)),
                policy_pb2.GPUPolicy(gpu_id=2),  # removal
            ]
        ),
    )


def _profiles() -> Req.PowerProfileRequest:
    return Req.PowerProfileRequest(enable_profile_ids=[3, 4, 258], disable_profile_ids=[7])


def _envelope(**fields: object) -> Req:
    return Req(
        device="node001",
        request_id="req-1",
        trace_id="trace-1",
        timeout_seconds=30,
        device_model_json=b'{"Name": "node001", "Model": "DGX_GB200"}',
        device_state_json=b'{"session": "/redfish/v1/SessionService/Sessions/1"}',
        **fields,  # type: ignore[arg-type]
    )


def _allocation() -> Req.AllocationRequest:
    return Req.AllocationRequest(
        resource_group="rg-1",
        policy=Req.PolicySetRequest(policy_action=Req.SET_POLICY, policy=_policy()),
        gpu_policies=_gpu_set(),
        workload_profiles=_profiles(),
    )


def valid(kind: RequestKind) -> Req:
    """A fully populated, valid request of `kind`."""
    member: object
    if kind.value.startswith("resource_group_"):
        member = _allocation()
    elif kind is RequestKind.TOPOLOGY_ACTIVATE:
        member = Req.PolicySetRequest(policy_action=Req.SET_POLICY, policy=_policy())
    elif kind is RequestKind.TOPOLOGY_DEACTIVATE:
        member = Req.PolicySetRequest(policy_action=Req.UNSET_POLICY)
    elif kind is RequestKind.GPU_POLICIES_UPDATE:
        member = _gpu_set()
    elif kind.value.endswith("_workload_profile"):
        member = _profiles()
    elif kind is RequestKind.PING:
        member = Req.PingRequest(retry_count=100)
    elif kind is RequestKind.GPU_METRICS:
        member = Req.GPUMetricsRequest(gpu_ids=[0, 1, 3])
    elif kind is RequestKind.MODIFY_ENTITY_MODEL:
        member = Req.EntityModificationRequest(
            phase=1,
            old_device_model=b'{"Model": "DGX_H100"}',
            new_device_model=b'{"Model": "DGX_B200"}',
            old_default_policy=_policy("old"),
            new_default_policy=_policy("new"),
            resource_group="rg-1",
        )
    else:
        msg = _envelope()
        getattr(msg, kind.value).SetInParent()
        return msg
    return _envelope(**{kind.value: member})


# ---- valid requests ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(RequestKind), ids=lambda k: k.value)
def test_valid_request_of_every_kind_passes_and_translates(kind: RequestKind) -> None:
    msg = valid(kind)
    validate_request(msg)
    assert request_problems(msg) == []
    assert request_from_proto(msg)[0] is kind


def _minimal_allocation() -> Req:
    return Req(device="d", request_id="r", resource_group_update=Req.AllocationRequest(resource_group="rg"))


@pytest.mark.parametrize(
    "msg",
    [
        _minimal_allocation(),
        Req(device="d", request_id="r", ping=Req.PingRequest()),
        Req(device="d", request_id="r", gpu_metrics=Req.GPUMetricsRequest()),
        Req(
            device="d",
            request_id="r",
            topology_deactivate=Req.PolicySetRequest(policy_action=Req.UNSET_POLICY),
        ),
        Req(device="d", request_id="r", modify_entity_model=Req.EntityModificationRequest()),
        Req(device="d" * 256, request_id="r" * 256, trace_id="t" * 256, ping=Req.PingRequest()),
        Req(device="d", request_id="r", timeout_seconds=86_400, ping=Req.PingRequest()),
        # a reset ignores gpu_policies, so whatever they hold is not an error
        Req(
            device="d",
            request_id="r",
            gpu_policies_update=Req.GPUPoliciesSetRequest(
                gpu_policy_action=Req.UNSET_POLICY,
                gpu_policies=policy_pb2.GPUPolicies(
                    policies=[
                        policy_pb2.GPUPolicy(gpu_id=1, power_limit=policy_pb2.PowerLimit(watts=-1)),
                        policy_pb2.GPUPolicy(gpu_id=1),
                    ]
                ),
            ),
        ),
    ],
    ids=[
        "empty-allocation",
        "ping",
        "all-gpus",
        "unset",
        "entity-empty-models",
        "max-lengths",
        "max-timeout",
        "reset",
    ],
)
def test_minimal_requests_pass(msg: Req) -> None:
    validate_request(msg)
    request_from_proto(msg)


# ---- one case per rule -------------------------------------------------------------------------

Mutation = Callable[[Req], object]


def _set(path: str, value: object) -> Mutation:
    """A mutation assigning `value` to the dotted attribute `path`."""

    def mutate(msg: Req) -> None:
        *parents, last = path.split(".")
        target: object = msg
        for name in parents:
            target = getattr(target, name)
        setattr(target, last, value)

    return mutate


def _gpu_limit(index: int) -> Callable[[Req], policy_pb2.PowerLimit]:
    return lambda msg: msg.gpu_policies_update.gpu_policies.policies[index].power_limit


def _topology_limit(msg: Req, index: int) -> policy_pb2.PolicyLimit:
    return msg.topology_activate.policy.limits[index]


RULES: list[tuple[str, RequestKind, Mutation, str, str]] = [
    # (id, base kind, mutation, field path, words the message must contain)
    ("device-empty", RequestKind.PING, _set("device", ""), "device:", "must not be empty"),
    (
        "device-long",
        RequestKind.PING,
        _set("device", "d" * 257),
        "device:",
        "at most 256 characters, got 257",
    ),
    ("device-control", RequestKind.PING, _set("device", "node\n001"), "device:", "U+000A"),
    ("device-nul", RequestKind.PING, _set("device", "node\x00"), "device:", "control characters"),
    ("request-id-empty", RequestKind.PING, _set("request_id", ""), "request_id:", "must not be empty"),
    ("request-id-long", RequestKind.PING, _set("request_id", "r" * 300), "request_id:", "got 300"),
    ("trace-id-long", RequestKind.PING, _set("trace_id", "t" * 257), "trace_id:", "at most 256"),
    (
        "no-kind",
        RequestKind.PING,
        lambda m: m.ClearField("ping"),
        "request:",
        "no request kind set; expected one of",
    ),
    ("timeout", RequestKind.PING, _set("timeout_seconds", 86_401), "timeout_seconds:", "impossible timeout"),
    (
        "model-not-utf8",
        RequestKind.PING,
        _set("device_model_json", b'{"a": "\xff"}'),
        "device_model_json:",
        "UTF-8",
    ),
    (
        "model-not-json",
        RequestKind.PING,
        _set("device_model_json", b"{nope"),
        "device_model_json:",
        "not valid JSON",
    ),
    (
        "model-array",
        RequestKind.PING,
        _set("device_model_json", b"[1, 2]"),
        "device_model_json:",
        "got array",
    ),
    ("model-nan", RequestKind.PING, _set("device_model_json", b'{"a": NaN}'), "device_model_json:", "NaN"),
    (
        "state-not-json",
        RequestKind.PING,
        _set("device_state_json", b"\x00"),
        "device_state_json:",
        "not valid JSON",
    ),
    ("state-string", RequestKind.PING, _set("device_state_json", b'"x"'), "device_state_json:", "got string"),
    (
        "state-too-big",
        RequestKind.PING,
        _set("device_state_json", b'{"a": "' + b"x" * (1 << 20) + b'"}'),
        "device_state_json:",
        "exceeds the limit of 1048576 bytes",
    ),
    (
        "policy-watts-negative",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 0).power_limit, "watts", -1.0),
        "topology_activate.policy.limits[0].power_limit.watts:",
        "must be a finite number >= 0, got -1",
    ),
    (
        "policy-watts-inf",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 2).power_limit, "watts", float("inf")),
        "topology_activate.policy.limits[2].power_limit.watts:",
        "got inf",
    ),
    (
        "policy-percentage-nan",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 1).power_limit, "percentage", float("nan")),
        "topology_activate.policy.limits[1].power_limit.percentage:",
        "got nan",
    ),
    (
        "policy-percentage-over-100",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 1).power_limit, "percentage", 100.5),
        "topology_activate.policy.limits[1].power_limit.percentage:",
        "must be at most 100, got 100.5",
    ),
    (
        "policy-limit-unset",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: _topology_limit(m, 3).ClearField("power_limit"),
        "topology_activate.policy.limits[3].power_limit:",
        "must set watts or percentage",
    ),
    (
        "element-unspecified",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 0), "element_type", policy_pb2.COMP_UNSPECIFIED),
        "topology_activate.policy.limits[0].element_type:",
        "COMP_UNSPECIFIED",
    ),
    (
        "element-unknown",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 0), "element_type", 42),
        "topology_activate.policy.limits[0].element_type:",
        "unknown element type 42",
    ),
    (
        "element-duplicate",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: setattr(_topology_limit(m, 3), "element_type", policy_pb2.COMP_GPU),
        "topology_activate.policy.limits[3].element_type:",
        "duplicate COMP_GPU (also at limits[1])",
    ),
    (
        "policy-name-long",
        RequestKind.TOPOLOGY_ACTIVATE,
        _set("topology_activate.policy.name", "p" * 257),
        "topology_activate.policy.name:",
        "at most 256 characters",
    ),
    (
        "policy-properties-nan",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: m.topology_activate.policy.properties.update({"deep": {"x": [0, float("nan")]}}),
        "topology_activate.policy.properties.deep.x[1]:",
        "must be a finite number",
    ),
    (
        "policy-action-unspecified",
        RequestKind.TOPOLOGY_ACTIVATE,
        _set("topology_activate.policy_action", Req.POLICY_ACTION_UNSPECIFIED),
        "topology_activate.policy_action:",
        "got POLICY_ACTION_UNSPECIFIED",
    ),
    (
        "set-without-policy",
        RequestKind.TOPOLOGY_ACTIVATE,
        lambda m: m.topology_activate.ClearField("policy"),
        "topology_activate.policy:",
        "required when policy_action is SET_POLICY",
    ),
    (
        "gpu-action-unspecified",
        RequestKind.GPU_POLICIES_UPDATE,
        _set("gpu_policies_update.gpu_policy_action", Req.POLICY_ACTION_UNSPECIFIED),
        "gpu_policies_update.gpu_policy_action:",
        "must be SET_POLICY or UNSET_POLICY",
    ),
    (
        "gpu-watts-nan",
        RequestKind.GPU_POLICIES_UPDATE,
        lambda m: setattr(_gpu_limit(1)(m), "watts", float("nan")),
        "gpu_policies_update.gpu_policies.policies[1].power_limit.watts:",
        "must be a finite number >= 0, got nan",
    ),
    (
        "gpu-percentage-over-100",
        RequestKind.GPU_POLICIES_UPDATE,
        lambda m: setattr(_gpu_limit(0)(m), "percentage", 101.0),
        "gpu_policies_update.gpu_policies.policies[0].power_limit.percentage:",
        "at most 100, got 101",
    ),
    (
        "gpu-limit-empty",
        RequestKind.GPU_POLICIES_UPDATE,
        lambda m: m.gpu_policies_update.gpu_policies.policies[2].power_limit.SetInParent(),
        "gpu_policies_update.gpu_policies.policies[2].power_limit:",
        "must set watts or percentage",
    ),
    (
        "gpu-duplicate-id",
        RequestKind.GPU_POLICIES_UPDATE,
        lambda m: setattr(m.gpu_policies_update.gpu_policies.policies[2], "gpu_id", 0),
        "gpu_policies_update.gpu_policies.policies[2].gpu_id:",
        "duplicate GPU id 0 (also at [0])",
    ),
    (
        "gpu-current-policy-negative",
        RequestKind.GPU_POLICIES_UPDATE,
        lambda m: setattr(m.gpu_policies_update.current_policy.limits[0].power_limit, "watts", -0.5),
        "gpu_policies_update.current_policy.limits[0].power_limit.watts:",
        "got -0.5",
    ),
    (
        "gpu-resource-group-long",
        RequestKind.GPU_POLICIES_UPDATE,
        _set("gpu_policies_update.resource_group", "g" * 257),
        "gpu_policies_update.resource_group:",
        "at most 256 characters",
    ),
    (
        "allocation-resource-group-long",
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        _set("resource_group_activate.resource_group", "g" * 1000),
        "resource_group_activate.resource_group:",
        "got 1000",
    ),
    (
        "allocation-policy-action",
        RequestKind.RESOURCE_GROUP_UPDATE,
        _set("resource_group_update.policy.policy_action", Req.POLICY_ACTION_UNSPECIFIED),
        "resource_group_update.policy.policy_action:",
        "POLICY_ACTION_UNSPECIFIED",
    ),
    (
        "allocation-gpu-watts",
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        lambda m: setattr(
            m.resource_group_activate.gpu_policies.gpu_policies.policies[0].power_limit, "watts", -2.0
        ),
        "resource_group_activate.gpu_policies.gpu_policies.policies[0].power_limit.watts:",
        "got -2",
    ),
    (
        "allocation-profile-range",
        RequestKind.RESOURCE_GROUP_DEACTIVATE,
        lambda m: m.resource_group_deactivate.workload_profiles.enable_profile_ids.append(259),
        "resource_group_deactivate.workload_profiles.enable_profile_ids[3]:",
        "outside 3..258",
    ),
    (
        "profile-below-range",
        RequestKind.ENABLE_WORKLOAD_PROFILE,
        lambda m: m.enable_workload_profile.enable_profile_ids.append(2),
        "enable_workload_profile.enable_profile_ids[3]:",
        "profile id 2 is outside 3..258",
    ),
    (
        "profile-negative",
        RequestKind.DISABLE_WORKLOAD_PROFILE,
        lambda m: m.disable_workload_profile.disable_profile_ids.append(-4),
        "disable_workload_profile.disable_profile_ids[1]:",
        "outside 3..258",
    ),
    (
        "profile-in-both",
        RequestKind.UPDATE_WORKLOAD_PROFILE,
        lambda m: m.update_workload_profile.disable_profile_ids.append(4),
        "update_workload_profile.disable_profile_ids[1]:",
        "profile id 4 is also in enable_profile_ids[1]",
    ),
    (
        "profile-duplicate",
        RequestKind.UPDATE_WORKLOAD_PROFILE,
        lambda m: m.update_workload_profile.enable_profile_ids.append(3),
        "update_workload_profile.enable_profile_ids[3]:",
        "duplicate profile id 3 (also at [0])",
    ),
    ("ping-negative", RequestKind.PING, _set("ping.retry_count", -1), "ping.retry_count:", "got -1"),
    (
        "ping-too-many",
        RequestKind.PING,
        _set("ping.retry_count", 101),
        "ping.retry_count:",
        "between 0 and 100",
    ),
    (
        "gpu-metrics-duplicate",
        RequestKind.GPU_METRICS,
        lambda m: m.gpu_metrics.gpu_ids.append(1),
        "gpu_metrics.gpu_ids[3]:",
        "duplicate GPU id 1",
    ),
    (
        "entity-phase",
        RequestKind.MODIFY_ENTITY_MODEL,
        _set("modify_entity_model.phase", 2),
        "modify_entity_model.phase:",
        "must be 0 or 1, got 2",
    ),
    (
        "entity-old-model",
        RequestKind.MODIFY_ENTITY_MODEL,
        _set("modify_entity_model.old_device_model", b"null"),
        "modify_entity_model.old_device_model:",
        "must be a JSON object, got null",
    ),
    (
        "entity-new-model",
        RequestKind.MODIFY_ENTITY_MODEL,
        _set("modify_entity_model.new_device_model", b'{"a": 1'),
        "modify_entity_model.new_device_model:",
        "not valid JSON",
    ),
    (
        "entity-default-policy",
        RequestKind.MODIFY_ENTITY_MODEL,
        lambda m: setattr(
            m.modify_entity_model.new_default_policy.limits[1].power_limit, "percentage", 250.0
        ),
        "modify_entity_model.new_default_policy.limits[1].power_limit.percentage:",
        "at most 100, got 250",
    ),
    (
        "entity-old-default-policy",
        RequestKind.MODIFY_ENTITY_MODEL,
        lambda m: setattr(m.modify_entity_model.old_default_policy.limits[0], "element_type", 0),
        "modify_entity_model.old_default_policy.limits[0].element_type:",
        "COMP_UNSPECIFIED",
    ),
    # a nameless resource group is never made: an allocation names its group, and a name is more
    # than blanks (a GPU-policies update without a group is the topology's: `gpu_scope`)
    (
        "allocation-resource-group-empty",
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        _set("resource_group_activate.resource_group", ""),
        "resource_group_activate.resource_group:",
        "required: the resource group to activate, update or deactivate",
    ),
    (
        "deactivate-resource-group-empty",
        RequestKind.RESOURCE_GROUP_DEACTIVATE,
        _set("resource_group_deactivate.resource_group", ""),
        "resource_group_deactivate.resource_group:",
        "required",
    ),
    (
        "gpu-policies-resource-group-blank",
        RequestKind.GPU_POLICIES_UPDATE,
        _set("gpu_policies_update.resource_group", "  "),
        "gpu_policies_update.resource_group:",
        "must be a name, got only blanks",
    ),
    (
        "entity-resource-group-long",
        RequestKind.MODIFY_ENTITY_MODEL,
        _set("modify_entity_model.resource_group", "g" * 257),
        "modify_entity_model.resource_group:",
        "at most 256",
    ),
]


@pytest.mark.parametrize(
    ("kind", "mutate", "field", "words"), [rule[1:] for rule in RULES], ids=[rule[0] for rule in RULES]
)
def test_rule(kind: RequestKind, mutate: Mutation, field: str, words: str) -> None:
    msg = valid(kind)
    mutate(msg)
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_request(msg)
    message = excinfo.value.message
    assert message.startswith(field), message  # exactly one problem, and it names the field
    assert words in message, message
    assert request_problems(msg) == [message]


def test_every_problem_is_reported() -> None:
    msg = valid(RequestKind.GPU_POLICIES_UPDATE)
    msg.device = ""
    msg.request_id = ""
    msg.gpu_policies_update.gpu_policies.policies[0].power_limit.watts = float("nan")
    problems = request_problems(msg)
    assert [p.split(":")[0] for p in problems] == [
        "device",
        "request_id",
        "gpu_policies_update.gpu_policies.policies[0].power_limit.watts",
    ]
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_request(msg)
    assert excinfo.value.message == "; ".join(problems)


def test_long_lists_are_summarised() -> None:
    msg = Req(device="d", request_id="r", gpu_metrics=Req.GPUMetricsRequest(gpu_ids=[1] * 20))
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_request(msg)
    assert excinfo.value.message.endswith("; and 9 more")


def test_limits_are_configurable() -> None:
    msg = valid(RequestKind.PING)
    msg.timeout_seconds = 10
    validate_request(msg, max_timeout_seconds=10)
    with pytest.raises(InvalidRequestError, match="timeout_seconds: impossible timeout of 11 s"):
        msg.timeout_seconds = 11
        validate_request(msg, max_timeout_seconds=10)
    with pytest.raises(InvalidRequestError, match=r"device_model_json: .* exceeds the limit of 8 bytes"):
        validate_request(msg, max_json_bytes=8)


def test_invalid_request_error_is_not_retryable() -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        validate_request(Req())
    assert excinfo.value.retryable is False
    assert excinfo.value.code == "INVALID_ARGUMENT"


# ---- parse_json_object -------------------------------------------------------------------------


def test_parse_json_object() -> None:
    assert parse_json_object(b"", "f") == {}
    assert parse_json_object(b'{"a": [1, {"b": null}]}', "f") == {"a": [1, {"b": None}]}
    assert parse_json_object('{"é": "ü"}'.encode(), "f") == {"é": "ü"}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\xff{}", "not valid UTF-8 (byte 0xff at offset 0)"),
        (b'{"a": Infinity}', "Infinity is not valid JSON"),
        (b"{", "not valid JSON"),
        (b"3", "got number"),
        (b"true", "got boolean"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON nested deeper than 32 levels"),
    ],
    ids=["utf8", "infinity", "truncated", "number", "boolean", "deep"],
)
def test_parse_json_object_names_the_field(data: bytes, words: str) -> None:
    with pytest.raises(InvalidRequestError) as excinfo:
        parse_json_object(data, "spec.model")
    assert excinfo.value.message.startswith("spec.model: ")
    assert words in excinfo.value.message


def test_parse_json_object_size_limit() -> None:
    with pytest.raises(InvalidRequestError, match=r"^f: 3 bytes exceeds the limit of 2 bytes$"):
        parse_json_object(b"{ }", "f", max_bytes=2)


def test_whatever_passes_also_translates() -> None:
    """Corrupt valid requests at random: anything validate_request accepts must translate."""
    rng = random.Random(20261121)
    accepted = 0
    for _ in range(3000):
        kind = rng.choice(list(RequestKind))
        data = bytearray(valid(kind).SerializeToString())
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            msg = Req.FromString(bytes(data))
        except DecodeError:
            continue
        if request_problems(msg):
            continue
        accepted += 1
        translated_kind, _ = request_from_proto(msg)
        assert translated_kind.value == msg.WhichOneof("request")
    assert accepted > 100  # the corruption leaves plenty of valid requests to check


def test_control_characters_are_exactly_unicodes_category_cc() -> None:
    import sys
    import unicodedata

    from controller.api.checks import Checker

    flagged = []
    for code in range(sys.maxunicode + 1):
        checker = Checker(max_json_bytes=1024)
        checker.text("device", f"node{chr(code)}", required=True, max_chars=16, plain=True)
        if checker.problems:
            found = f"found U+{code:04X} at 4"
            assert checker.problems == [f"device: must not contain control characters, {found}"]
            flagged.append(code)
    assert flagged == [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cc"]
