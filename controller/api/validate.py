"""Structural validation of an incoming `DeviceControllerRequest`, before it is journaled.

The checks here need nothing but the message itself: no inventory, no device spec, no plugin.
They catch what no device could ever carry out (a NaN watt limit, profile id 2, a policy naming
the GPU twice) so a bad request is refused at the RPC edge with a message that names the
offending field by its proto path, e.g.::

    gpu_policies_update.gpu_policies.policies[1].power_limit.watts: must be a finite number >= 0, got nan

Whether a limit fits the device (min/max watts) is the plugin's business: it needs the spec.

A request that passes `validate_request` is guaranteed to translate with
`controller.translate.request_from_proto`. The envelope's checks are here; each kind's member is
checked by the `Checker` method its row in `controller.translate.kinds` names (`controller.api.checks`).
"""

from __future__ import annotations

from google.protobuf.message import Message

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api.checks import (
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PING_RETRIES,
    MAX_PROFILE_ID,
    MAX_REPEATED,
    MIN_PROFILE_ID,
    Checker,
)
from controller.api.json_fields import DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_JSON_DEPTH
from controller.desired.limits import INTERNAL_PREFIX
from controller.translate.kinds import translation_of
from plugins.base import InvalidRequestError
from plugins.base.kinds import KINDS

__all__ = [
    "DEFAULT_MAX_TIMEOUT_SECONDS",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PING_RETRIES",
    "MAX_PROFILE_ID",
    "MAX_REPEATED",
    "MIN_PROFILE_ID",
    "member_problems",
    "request_problems",
    "validate_request",
]

DEFAULT_MAX_TIMEOUT_SECONDS = 86_400
#: how many problems one error message lists before it summarises the rest
_MAX_LISTED = 10


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
    check = Checker(max_json_bytes, max_json_depth)
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
        expected = ", ".join(KINDS.names())
        check.add("request", f"no request kind set; expected one of {expected}")
        return check.problems
    check.problems.extend(
        member_problems(
            member, getattr(msg, member), max_json_bytes=max_json_bytes, max_json_depth=max_json_depth
        )
    )
    return check.problems


def member_problems(
    kind: str,
    member: Message,
    *,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> list[str]:
    """Every problem found in a kind's request member, each path starting with the kind's name:
    the checks its row in `controller.translate.kinds` names."""
    check = Checker(max_json_bytes, max_json_depth)
    translation_of(kind).check(check, str(kind), member)
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
