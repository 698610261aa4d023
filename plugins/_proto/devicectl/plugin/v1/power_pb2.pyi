import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from plugins._proto.nomad.plugins.device import device_pb2 as _device_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Endpoint(_message.Message):
    __slots__ = ("url", "has_credentials", "username", "password", "verify_tls", "ca_bundle", "options_json")
    URL_FIELD_NUMBER: _ClassVar[int]
    HAS_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    VERIFY_TLS_FIELD_NUMBER: _ClassVar[int]
    CA_BUNDLE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    url: str
    has_credentials: bool
    username: str
    password: str
    verify_tls: bool
    ca_bundle: str
    options_json: str
    def __init__(self, url: _Optional[str] = ..., has_credentials: _Optional[bool] = ..., username: _Optional[str] = ..., password: _Optional[str] = ..., verify_tls: _Optional[bool] = ..., ca_bundle: _Optional[str] = ..., options_json: _Optional[str] = ...) -> None: ...

class DeviceTarget(_message.Message):
    __slots__ = ("device_id", "model_json", "endpoint")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_JSON_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    model_json: str
    endpoint: Endpoint
    def __init__(self, device_id: _Optional[str] = ..., model_json: _Optional[str] = ..., endpoint: _Optional[_Union[Endpoint, _Mapping]] = ...) -> None: ...

class OperationRequest(_message.Message):
    __slots__ = ("target", "request_id", "trace_id", "remaining", "state_json", "request_json", "dry_run", "kind")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    target: DeviceTarget
    request_id: str
    trace_id: str
    remaining: _duration_pb2.Duration
    state_json: str
    request_json: str
    dry_run: bool
    kind: str
    def __init__(self, target: _Optional[_Union[DeviceTarget, _Mapping]] = ..., request_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., remaining: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., state_json: _Optional[str] = ..., request_json: _Optional[str] = ..., dry_run: _Optional[bool] = ..., kind: _Optional[str] = ...) -> None: ...

class OperationError(_message.Message):
    __slots__ = ("code", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class OperationResponse(_message.Message):
    __slots__ = ("result_json", "has_state", "state_json", "reached_at", "reach_error", "verification_json", "error", "writes_json")
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    HAS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    REACHED_AT_FIELD_NUMBER: _ClassVar[int]
    REACH_ERROR_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WRITES_JSON_FIELD_NUMBER: _ClassVar[int]
    result_json: str
    has_state: bool
    state_json: str
    reached_at: _timestamp_pb2.Timestamp
    reach_error: str
    verification_json: str
    error: OperationError
    writes_json: str
    def __init__(self, result_json: _Optional[str] = ..., has_state: _Optional[bool] = ..., state_json: _Optional[str] = ..., reached_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reach_error: _Optional[str] = ..., verification_json: _Optional[str] = ..., error: _Optional[_Union[OperationError, _Mapping]] = ..., writes_json: _Optional[str] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("context", "pending_json")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PENDING_JSON_FIELD_NUMBER: _ClassVar[int]
    context: OperationRequest
    pending_json: str
    def __init__(self, context: _Optional[_Union[OperationRequest, _Mapping]] = ..., pending_json: _Optional[str] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("done", "status", "detail", "error")
    DONE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    done: bool
    status: str
    detail: str
    error: OperationError
    def __init__(self, done: _Optional[bool] = ..., status: _Optional[str] = ..., detail: _Optional[str] = ..., error: _Optional[_Union[OperationError, _Mapping]] = ...) -> None: ...

class TargetsRequest(_message.Message):
    __slots__ = ("targets",)
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[DeviceTarget]
    def __init__(self, targets: _Optional[_Iterable[_Union[DeviceTarget, _Mapping]]] = ...) -> None: ...

class StatsTargetsRequest(_message.Message):
    __slots__ = ("targets", "collection_interval")
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    targets: _containers.RepeatedCompositeFieldContainer[DeviceTarget]
    collection_interval: _duration_pb2.Duration
    def __init__(self, targets: _Optional[_Iterable[_Union[DeviceTarget, _Mapping]]] = ..., collection_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("device_id",)
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    def __init__(self, device_id: _Optional[str] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RelinquishRequest(_message.Message):
    __slots__ = ("device_ids",)
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RelinquishResponse(_message.Message):
    __slots__ = ("cancelled", "running")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    running: int
    def __init__(self, cancelled: _Optional[int] = ..., running: _Optional[int] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("device_ids", "wait_seconds")
    DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    device_ids: _containers.RepeatedScalarFieldContainer[str]
    wait_seconds: float
    def __init__(self, device_ids: _Optional[_Iterable[str]] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class SettleResponse(_message.Message):
    __slots__ = ("running",)
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    running: int
    def __init__(self, running: _Optional[int] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("dry_run",)
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    def __init__(self, dry_run: _Optional[bool] = ...) -> None: ...
