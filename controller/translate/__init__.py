"""The translation layer: protobuf messages <-> the domain types of `plugins.base`.

Only this package, the gRPC server and the CLI touch protobuf; plugins and the rest of the
controller work with `plugins.base` types. Every request kind and every response member is
covered both ways.

- `request_from_proto` / `request_to_proto`: `DeviceControllerRequest` <-> (kind, request).
- `response_to_proto` / `response_from_proto`: (kind, result or Outcome) <-> response.
- `error_response`: a failed response of the right member for a kind; `bounded_response` swaps
  a response over `MAX_RESPONSE_BYTES` for one.
- `success_of`: overall success and error text of any response.
- `split_write`: a component's `diag_msg` split into the rest and what its write did on the device;
  `without_writes`: a failure text without those outcomes (for a dry run, which wrote nothing).
- `datetime_to_timestamp` / `timestamp_to_datetime`, `encode_json_object`.
"""

from controller.translate._diag import split_write, without_writes
from controller.translate._failures import MAX_RESPONSE_BYTES, bounded_response, error_response, success_of
from controller.translate._json import encode_json_object
from controller.translate._kinds import REQUEST_TYPES, RESULT_TYPES, request_kind, response_kind
from controller.translate._metrics import ENERGY_UNIT
from controller.translate._requests import request_from_proto, request_to_proto
from controller.translate._responses import response_from_proto, response_to_proto
from controller.translate._time import datetime_to_timestamp, timestamp_to_datetime

__all__ = [
    "ENERGY_UNIT",
    "MAX_RESPONSE_BYTES",
    "REQUEST_TYPES",
    "RESULT_TYPES",
    "bounded_response",
    "datetime_to_timestamp",
    "encode_json_object",
    "error_response",
    "request_from_proto",
    "request_kind",
    "request_to_proto",
    "response_from_proto",
    "response_kind",
    "response_to_proto",
    "split_write",
    "success_of",
    "timestamp_to_datetime",
    "without_writes",
]
