"""The checks of `controller.api.validate`, one method per message shape, and the bounds they hold.

`Checker` collects every problem as `"<proto field path>: <what is wrong>"`; each request kind's row
in `controller.translate.kinds` names the method that checks its member.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

from google.protobuf import struct_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import policy_pb2
from controller.api.json_fields import DEFAULT_MAX_JSON_DEPTH, parse_json_object
from plugins.base import InvalidRequestError
from plugins.base.bounds import MAX_WATTS, shown
from plugins.base.health import MAX_TELEMETRY_SAMPLES, MAX_WRITE_RESOLUTION_MS

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

_Req = pb.DeviceControllerRequest
_ELEMENT_TYPES = (policy_pb2.COMP_NODE, policy_pb2.COMP_GPU, policy_pb2.COMP_CPU, policy_pb2.COMP_MEMORY)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Unicode's category Cc (control characters), all of it: U+0000-U+001F and U+007F-U+009F
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


class Checker:
    """Collects problems as `"<field path>: <what is wrong>"` strings; one method per message shape
    (the request kinds' rows in `controller.translate.kinds` name theirs)."""

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
            found = _CONTROL.search(value)
            if found is not None:
                index, char = found.start(), found.group()
                self.add(path, f"must not contain control characters, found U+{ord(char):04X} at {index}")

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

    def ping(self, path: str, req: pb.DeviceControllerRequest.PingRequest) -> None:
        if not 0 <= req.retry_count <= MAX_PING_RETRIES:
            self.add(
                f"{path}.retry_count", f"must be between 0 and {MAX_PING_RETRIES}, got {req.retry_count}"
            )

    def gpu_metrics(self, path: str, req: pb.DeviceControllerRequest.GPUMetricsRequest) -> None:
        if not self.too_many(f"{path}.gpu_ids", len(req.gpu_ids)):
            self.duplicates(f"{path}.gpu_ids", req.gpu_ids, "GPU id")

    def bmc_health(self, path: str, req: pb.DeviceControllerRequest.BMCHealthDeviceRequest) -> None:
        for name in ("samples_per_telemetry", "telemetry_interval_ms", "write_resolution_timeout_ms"):
            if getattr(req, name) < 0:
                self.add(f"{path}.{name}", f"must not be negative, got {getattr(req, name)}")
        if req.samples_per_telemetry > MAX_TELEMETRY_SAMPLES:
            self.add(
                f"{path}.samples_per_telemetry",
                f"at most {MAX_TELEMETRY_SAMPLES}, got {req.samples_per_telemetry}",
            )
        if req.telemetry_interval_ms > MAX_WRITE_RESOLUTION_MS:
            self.add(
                f"{path}.telemetry_interval_ms",
                f"at most {MAX_WRITE_RESOLUTION_MS}, got {req.telemetry_interval_ms}",
            )

    def nothing(self, path: str, req: object) -> None:
        """A member with nothing to check (`google.protobuf.Empty`)."""
