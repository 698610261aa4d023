"""The translation layer: protobuf messages <-> the domain types of `plugins.base`.

Only this package, the gRPC server and the CLI touch protobuf; plugins and the rest of the
controller work with `plugins.base` types. Every request kind and every response member is
covered both ways, by the kind's row in `kinds` (the table of request kinds on the API: each
member's check, translation both ways, failure and success; `register` adds a kind).

- `request_from_proto` / `request_to_proto`: `DeviceControllerRequest` <-> (kind, request).
- `response_to_proto` / `response_from_proto`: (kind, result or Outcome) <-> response.
- `error_response`: a failed response of the right member for a kind; `bounded_response` swaps
  a response over `MAX_RESPONSE_BYTES` for one (`bounded_serialized`: with its bytes).
- `success_of`: overall success and error text of any response.
- `request_member_from_proto`, `result_member_to_proto`, `failed_member`, `member_success` (and
  the other `*_member_*`): the same for one kind's member alone.
- `split_write`: a component's `diag_msg` split into the rest and what its write did on the device;
  `without_writes`: a failure text without those outcomes (for a dry run, which wrote nothing).
- `datetime_to_timestamp` / `timestamp_to_datetime`, `encode_json_object`.
"""

from controller.translate._diag import split_write, without_writes
from controller.translate._envelope import (
    MAX_RESPONSE_BYTES,
    bounded_response,
    bounded_serialized,
    error_response,
    failed_member,
    member_success,
    request_from_proto,
    request_kind,
    request_member_from_proto,
    request_member_to_proto,
    request_to_proto,
    response_from_proto,
    response_kind,
    response_to_proto,
    result_member_from_proto,
    result_member_to_proto,
    success_of,
)
from controller.translate._json import encode_json_object
from controller.translate._metrics import ENERGY_UNIT
from controller.translate._time import datetime_to_timestamp, timestamp_to_datetime

__all__ = [
    "ENERGY_UNIT",
    "MAX_RESPONSE_BYTES",
    "bounded_response",
    "bounded_serialized",
    "datetime_to_timestamp",
    "encode_json_object",
    "error_response",
    "failed_member",
    "member_success",
    "request_from_proto",
    "request_kind",
    "request_member_from_proto",
    "request_member_to_proto",
    "request_to_proto",
    "response_from_proto",
    "response_kind",
    "response_to_proto",
    "result_member_from_proto",
    "result_member_to_proto",
    "split_write",
    "success_of",
    "timestamp_to_datetime",
    "without_writes",
]
