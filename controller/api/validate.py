"""Structural validation of an incoming `DeviceControllerRequest`, before it is journaled.

The checks here need nothing but the message itself: no inventory, no device spec, no plugin.
They catch what no device could ever carry out (a NaN watt limit, profile id 2, a policy naming
the GPU twice) so a bad request is refused at the RPC edge with a message that names the
offending field by its proto path, e.g.::

    gpu_policies_update.gpu_policies.policies[1].power_limit.watts: must be a finite number >= 0, got nan

Whether a limit fits the device (min/max watts) is the plugin's business: it needs the spec.

A request that passes `validate_request` is guaranteed to translate with
`controller.translate.request_from_proto`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable

from google.protobuf import struct_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.json_fields import DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_JSON_DEPTH, parse_json_object
from controller.desired.limits import INTERNAL_PREFIX
from plugins.base import InvalidRequestError, RequestKind
from plugins.base.bounds import MAX_WATTS, shown
from plugins.base.health import MAX_TELEMETRY_SAMPLES, MAX_WRITE_RESOLUTION_MS

__all__ = [
    "DEFAULT_MAX_TIMEOUT_SECONDS",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PING_RETRIES",
    "MAX_PROFILE_ID",
    "MAX_REPEATED",
    "MIN_PROFILE_ID",
    "request_problems",
    "validate_request",
]

#: longest accepted `device`, `request_id` and `trace_id`
MAX_ID_CHARS = 256
#: longest accepted resource group or policy name
MAX_NAME_CHARS = 256
#: workload power profile ids are out-of-band (Redfish) ids: nvidia-smi id + 3, so 3..258
MIN_PROFILE_ID = 3
MAX_PROFILE_ID = 258
MAX_PING_RETRIES = 100
#: most entries in a repeated request field (GPU policies, GPU ids, profile ids, policy limits):
#: far above any node (an NVL72 rack has 72 GPUs), far below what could push a response past the
#: receiver's 4 MiB message limit
MAX_REPEATED = 1024
DEFAULT_MAX_TIMEOUT_SECONDS = 86_400
#: how many problems one error message lists before it summarises the rest
_MAX_LISTED = 10

_Req = pb.DeviceControllerRequest
_ALLOCATION_KINDS = frozenset(
    {
        RequestKind.RESOURCE_GROUP_ACTIVATE,
        RequestKind.RESOURCE_GROUP_DEACTIVATE,
        RequestKind.RESOURCE_GROUP_UPDATE,
    }
)
_POLICY_SET_KINDS = frozenset({RequestKind.TOPOLOGY_ACTIVATE, RequestKind.TOPOLOGY_DEACTIVATE})
_PROFILE_KINDS = frozenset(
    {
        RequestKind.ENABLE_WORKLOAD_PROFILE,
        RequestKind.DISABLE_WORKLOAD_PROFILE,
        RequestKind.UPDATE_WORKLOAD_PROFILE,
    }
)
_ELEMENT_TYPES = (policy_pb2.COMP_NODE, policy_pb2.COMP_GPU, policy_pb2.COMP_CPU, policy_pb2.COMP_MEMORY)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ---- the checks ------------------------------------------------------------------------------


class _Checker:
    """Collects problems as `"<field path>: <what is wrong>"` strings."""

    def __init__(self, max_json_bytes: int, max_json_depth: int = DEFAULT_MAX_JSON_DEPTH) -> None:
        self.problems: list[str] = []
        self.max_json_bytes = max_json_bytes
        self.max_json_depth = max_json_depth

    def add(self, path: str, problem: str) -> None:
        self.problems.append(f"{path}: {problem}")

    # -- scalars --

    def text(self, path: str, value: str, *, required: bool, max_chars: int, plain: bool) -> None:
        if required and not value:
            self.add(path, "must not be empty")
        if len(value) > max_chars:
            self.add(path, f"must be at most {max_chars} characters, got {len(value)}")
        if plain:
            # ids end up in logs, file names and SQL rows; a newline or NUL there is trouble
            for index, char in enumerate(value):
                if unicodedata.category(char) == "Cc":
                    self.add(path, f"must not contain control characters, found U+{ord(char):04X} at {index}")
                    break

    def name(self, path: str, value: str) -> None:
        """A resource group or policy name: optional, bounded; given, it is more than blanks."""
        self.text(path, value, required=False, max_chars=MAX_NAME_CHARS, plain=False)
        if value and not value.strip():
            self.add(path, "must be a name, got only blanks")

    def group(self, path: str, value: str) -> None:
        """The resource group an allocation activates, updates or deactivates: required (an
        empty name would make a nameless group that nothing names to restore)."""
        if not value:
            self.add(path, "required: the resource group to activate, update or deactivate")
        self.name(path, value)

    def json_object(self, path: str, data: bytes) -> None:
        try:
            parse_json_object(data, path, max_bytes=self.max_json_bytes, max_depth=self.max_json_depth)
        except InvalidRequestError as exc:
            self.problems.append(exc.message)

    def number(self, path: str, value: float, *, at_most: float | None = None) -> None:
        if not math.isfinite(value) or value < 0:
            self.add(path, f"must be a finite number >= 0, got {shown(value)}")
        elif at_most is not None and value > at_most:
            self.add(path, f"must be at most {shown(at_most)}, got {shown(value)}")

    def too_many(self, path: str, count: int, limit: int = MAX_REPEATED) -> bool:
        """Flag a repeated field longer than `limit`; True when it is (its items are not checked)."""
        if count > limit:
            self.add(path, f"at most {limit} entries, got {count}")
            return True
        return False

    def duplicates(self, path: str, values: Iterable[int], what: str, suffix: str = "") -> None:
        """Flag repeated values of a repeated field: `path[i]` + `suffix` for each repeat."""
        first: dict[int, int] = {}
        for index, value in enumerate(values):
            if value in first:
                self.add(f"{path}[{index}]{suffix}", f"duplicate {what} {value} (also at [{first[value]}])")
            else:
                first[value] = index

    # -- policy messages --

    def power_limit(self, path: str, limit: policy_pb2.PowerLimit) -> None:
        which = limit.WhichOneof("power_limit")
        if which == "watts":
            self.number(f"{path}.watts", limit.watts, at_most=MAX_WATTS)
        elif which == "percentage":
            self.number(f"{path}.percentage", limit.percentage, at_most=100.0)
        else:
            self.add(path, "must set watts or percentage")

    def struct(self, path: str, value: struct_pb2.Value, depth: int = 1) -> None:
        # MessageToDict refuses NaN and Infinity, so they would make the request untranslatable
        kind = value.WhichOneof("kind")
        if kind == "number_value" and not math.isfinite(value.number_value):
            self.add(path, f"must be a finite number, got {shown(value.number_value)}")
        elif kind == "struct_value":
            self.struct_fields(path, value.struct_value, depth + 1)
        elif kind == "list_value":
            if depth + 1 > self.max_json_depth:  # the same bound as the JSON fields: it ends up in state
                self.add(path, f"nested deeper than {self.max_json_depth} levels")
                return
            for index, item in enumerate(value.list_value.values):
                self.struct(f"{path}[{index}]", item, depth + 1)

    def struct_fields(self, path: str, struct: struct_pb2.Struct, depth: int = 1) -> None:
        if depth > self.max_json_depth:
            self.add(path, f"nested deeper than {self.max_json_depth} levels")
            return
        for key, item in struct.fields.items():
            child = f"{path}.{key}" if _IDENTIFIER.fullmatch(key) else f"{path}[{json.dumps(key)}]"
            self.struct(child, item, depth)

    def policy(self, path: str, policy: policy_pb2.PolicyObject) -> None:
        self.name(f"{path}.name", policy.name)
        if self.too_many(f"{path}.limits", len(policy.limits)):
            return
        seen: dict[int, int] = {}
        for index, limit in enumerate(policy.limits):
            limit_path = f"{path}.limits[{index}]"
            element = limit.element_type
            if element == policy_pb2.COMP_UNSPECIFIED:
                self.add(
                    f"{limit_path}.element_type",
                    "must be COMP_NODE, COMP_GPU, COMP_CPU or COMP_MEMORY, got COMP_UNSPECIFIED",
                )
            elif element not in _ELEMENT_TYPES:
                self.add(f"{limit_path}.element_type", f"unknown element type {element}")
            elif element in seen:
                name = policy_pb2.PolicyElementType.Name(element)
                self.add(
                    f"{limit_path}.element_type",
                    f"duplicate {name} (also at limits[{seen[element]}]); a policy has one limit per type",
                )
            else:
                seen[element] = index
            self.power_limit(f"{limit_path}.power_limit", limit.power_limit)
        if policy.HasField("properties"):
            self.struct_fields(f"{path}.properties", policy.properties)

    def action(self, path: str, action: int) -> bool:
        """Check a required PolicyAction; True when it is usable."""
        if action in (_Req.SET_POLICY, _Req.UNSET_POLICY):
            return True
        got = "POLICY_ACTION_UNSPECIFIED" if action == _Req.POLICY_ACTION_UNSPECIFIED else str(action)
        self.add(path, f"must be SET_POLICY or UNSET_POLICY, got {got}")
        return False

    # -- request members --

    def policy_set(self, path: str, req: pb.DeviceControllerRequest.PolicySetRequest) -> None:
        self.action(f"{path}.policy_action", req.policy_action)
        if req.HasField("policy"):
            self.policy(f"{path}.policy", req.policy)
        elif req.policy_action == _Req.SET_POLICY:
            self.add(f"{path}.policy", "required when policy_action is SET_POLICY")

    def gpu_policies_set(self, path: str, req: pb.DeviceControllerRequest.GPUPoliciesSetRequest) -> None:
        self.name(f"{path}.resource_group", req.resource_group)
        self.action(f"{path}.gpu_policy_action", req.gpu_policy_action)
        if req.HasField("current_policy"):
            self.policy(f"{path}.current_policy", req.current_policy)
        if req.gpu_policy_action == _Req.UNSET_POLICY:
            return  # a reset ignores gpu_policies (contract), so stale content there is harmless
        policies_path = f"{path}.gpu_policies.policies"
        if self.too_many(policies_path, len(req.gpu_policies.policies)):
            return
        self.duplicates(policies_path, (p.gpu_id for p in req.gpu_policies.policies), "GPU id", ".gpu_id")
        for index, policy in enumerate(req.gpu_policies.policies):
            # an absent power_limit is legal: it removes the GPU-specific policy
            if policy.HasField("power_limit"):
                self.power_limit(f"{policies_path}[{index}].power_limit", policy.power_limit)

    def profiles(self, path: str, req: pb.DeviceControllerRequest.PowerProfileRequest) -> None:
        for name, ids in (
            ("enable_profile_ids", req.enable_profile_ids),
            ("disable_profile_ids", req.disable_profile_ids),
        ):
            if self.too_many(f"{path}.{name}", len(ids)):
                return
            for index, profile_id in enumerate(ids):
                if not MIN_PROFILE_ID <= profile_id <= MAX_PROFILE_ID:
                    self.add(
                        f"{path}.{name}[{index}]",
                        f"profile id {profile_id} is outside {MIN_PROFILE_ID}..{MAX_PROFILE_ID} "
                        "(out-of-band ids: nvidia-smi id + 3)",
                    )
            self.duplicates(f"{path}.{name}", ids, "profile id")
        enabled: dict[int, int] = {}
        for index, profile_id in enumerate(req.enable_profile_ids):
            enabled.setdefault(profile_id, index)
        for index, profile_id in enumerate(req.disable_profile_ids):
            if profile_id in enabled:
                self.add(
                    f"{path}.disable_profile_ids[{index}]",
                    f"profile id {profile_id} is also in enable_profile_ids[{enabled[profile_id]}]",
                )

    def allocation(self, path: str, req: pb.DeviceControllerRequest.AllocationRequest) -> None:
        self.group(f"{path}.resource_group", req.resource_group)
        if req.HasField("policy"):
            self.policy_set(f"{path}.policy", req.policy)
        if req.HasField("gpu_policies"):
            self.gpu_policies_set(f"{path}.gpu_policies", req.gpu_policies)
        if req.HasField("workload_profiles"):
            self.profiles(f"{path}.workload_profiles", req.workload_profiles)

    def entity(self, path: str, req: pb.DeviceControllerRequest.EntityModificationRequest) -> None:
        if req.phase not in (0, 1):
            self.add(f"{path}.phase", f"must be 0 or 1, got {req.phase}")
        self.json_object(f"{path}.old_device_model", req.old_device_model)
        self.json_object(f"{path}.new_device_model", req.new_device_model)
        if req.HasField("old_default_policy"):
            self.policy(f"{path}.old_default_policy", req.old_default_policy)
        if req.HasField("new_default_policy"):
            self.policy(f"{path}.new_default_policy", req.new_default_policy)
        self.name(f"{path}.resource_group", req.resource_group)


def request_problems(
    msg: pb.DeviceControllerRequest,
    *,
    max_timeout_seconds: int = DEFAULT_MAX_TIMEOUT_SECONDS,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> list[str]:
    """Every problem found in `msg`, each as `"<proto field path>: <what is wrong>"`.

    An empty list means the request is structurally valid. See `validate_request` for the rules.
    """
    check = _Checker(max_json_bytes, max_json_depth)
    check.text("device", msg.device, required=True, max_chars=MAX_ID_CHARS, plain=True)
    check.text("request_id", msg.request_id, required=True, max_chars=MAX_ID_CHARS, plain=True)
    if msg.request_id.startswith(INTERNAL_PREFIX):
        check.add(
            "request_id", f"the prefix {INTERNAL_PREFIX!r} is reserved for the controller's own requests"
        )
    check.text("trace_id", msg.trace_id, required=False, max_chars=MAX_ID_CHARS, plain=True)
    if msg.timeout_seconds > max_timeout_seconds:
        check.add(
            "timeout_seconds",
            f"impossible timeout of {msg.timeout_seconds} s (at most {max_timeout_seconds} s)",
        )
    check.json_object("device_model_json", msg.device_model_json)
    check.json_object("device_state_json", msg.device_state_json)

    member = msg.WhichOneof("request")
    if member is None:
        expected = ", ".join(kind.value for kind in RequestKind)
        check.add("request", f"no request kind set; expected one of {expected}")
        return check.problems
    kind = RequestKind(member)
    if kind in _ALLOCATION_KINDS:
        check.allocation(member, getattr(msg, member))
    elif kind in _POLICY_SET_KINDS:
        check.policy_set(member, getattr(msg, member))
    elif kind is RequestKind.GPU_POLICIES_UPDATE:
        check.gpu_policies_set(member, msg.gpu_policies_update)
    elif kind in _PROFILE_KINDS:
        check.profiles(member, getattr(msg, member))
    elif kind is RequestKind.PING:
        if not 0 <= msg.ping.retry_count <= MAX_PING_RETRIES:
            check.add(
                "ping.retry_count", f"must be between 0 and {MAX_PING_RETRIES}, got {msg.ping.retry_count}"
            )
    elif kind is RequestKind.GPU_METRICS:
        if not check.too_many("gpu_metrics.gpu_ids", len(msg.gpu_metrics.gpu_ids)):
            check.duplicates("gpu_metrics.gpu_ids", msg.gpu_metrics.gpu_ids, "GPU id")
    elif kind is RequestKind.MODIFY_ENTITY_MODEL:
        check.entity(member, msg.modify_entity_model)
    elif kind is RequestKind.BMC_HEALTH:
        health = msg.bmc_health
        for name in ("samples_per_telemetry", "telemetry_interval_ms", "write_resolution_timeout_ms"):
            if getattr(health, name) < 0:
                check.add(f"bmc_health.{name}", f"must not be negative, got {getattr(health, name)}")
        if health.samples_per_telemetry > MAX_TELEMETRY_SAMPLES:
            check.add(
                "bmc_health.samples_per_telemetry",
                f"at most {MAX_TELEMETRY_SAMPLES}, got {health.samples_per_telemetry}",
            )
        if health.telemetry_interval_ms > MAX_WRITE_RESOLUTION_MS:
            check.add(
                "bmc_health.telemetry_interval_ms",
                f"at most {MAX_WRITE_RESOLUTION_MS}, got {health.telemetry_interval_ms}",
            )
    # raw_metrics and std_metrics carry google.protobuf.Empty: nothing to check
    return check.problems


def validate_request(
    msg: pb.DeviceControllerRequest,
    *,
    max_timeout_seconds: int = DEFAULT_MAX_TIMEOUT_SECONDS,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> None:
    """Refuse a request no device could carry out.

    Rules: `device` and `request_id` non-empty; `device`, `request_id`, `trace_id` at most 256
    characters and free of control characters; a request kind set; `timeout_seconds` at most
    `max_timeout_seconds`; `device_model_json` / `device_state_json` (and entity models)
    empty or a UTF-8 JSON object of at most `max_json_bytes`, nested at most
    `max_json_depth` deep; every watt or percentage value finite and >= 0, watts at most
    `MAX_WATTS` and percentages at most 100 (policy limits, GPU policies, current and default
    policies); one limit
    per element type and none COMP_UNSPECIFIED; policy actions set, and SET_POLICY with a
    policy; distinct GPU ids in GPU policies and GPU metrics queries; profile ids within 3..258,
    distinct, and never both enabled and disabled; ping retry_count within 0..100; entity
    modification phase 0 or 1 with JSON-object device models; resource group and policy names
    at most 256 characters; every repeated field (GPU policies and ids, profile ids, policy limits)
    at most `MAX_REPEATED` entries. The GPU policies of a reset (UNSET_POLICY) are not checked: the
    contract says they are ignored.

    Raises:
        InvalidRequestError: listing every problem found (the first ten, then a count), each
            prefixed with its proto field path.
    """
    problems = request_problems(
        msg,
        max_timeout_seconds=max_timeout_seconds,
        max_json_bytes=max_json_bytes,
        max_json_depth=max_json_depth,
    )
    if not problems:
        return
    text = "; ".join(problems[:_MAX_LISTED])
    if len(problems) > _MAX_LISTED:
        text += f"; and {len(problems) - _MAX_LISTED} more"
    raise InvalidRequestError(text)
