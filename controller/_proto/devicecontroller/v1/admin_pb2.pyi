import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as _devicecontroller_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RequestStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REQUEST_STATUS_UNSPECIFIED: _ClassVar[RequestStatus]
    QUEUED: _ClassVar[RequestStatus]
    RUNNING: _ClassVar[RequestStatus]
    COMPLETED: _ClassVar[RequestStatus]
REQUEST_STATUS_UNSPECIFIED: RequestStatus
QUEUED: RequestStatus
RUNNING: RequestStatus
COMPLETED: RequestStatus

class RequestRecord(_message.Message):
    __slots__ = ("request_id", "device", "kind", "trace_id", "status", "outcome", "error", "attempts", "accepted_at", "started_at", "finished_at", "deadline_at", "delivered_at", "delivery_attempts", "delivery_error", "response", "dead_lettered_at", "writes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_AT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_AT_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    device: str
    kind: str
    trace_id: str
    status: RequestStatus
    outcome: str
    error: str
    attempts: int
    accepted_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    deadline_at: _timestamp_pb2.Timestamp
    delivered_at: _timestamp_pb2.Timestamp
    delivery_attempts: int
    delivery_error: str
    response: _devicecontroller_pb2.DeviceControllerResponse
    dead_lettered_at: _timestamp_pb2.Timestamp
    writes: _containers.RepeatedCompositeFieldContainer[DeviceWrite]
    def __init__(self, request_id: _Optional[str] = ..., device: _Optional[str] = ..., kind: _Optional[str] = ..., trace_id: _Optional[str] = ..., status: _Optional[_Union[RequestStatus, str]] = ..., outcome: _Optional[str] = ..., error: _Optional[str] = ..., attempts: _Optional[int] = ..., accepted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_attempts: _Optional[int] = ..., delivery_error: _Optional[str] = ..., response: _Optional[_Union[_devicecontroller_pb2.DeviceControllerResponse, _Mapping]] = ..., dead_lettered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., writes: _Optional[_Iterable[_Union[DeviceWrite, _Mapping]]] = ...) -> None: ...

class DeviceWrite(_message.Message):
    __slots__ = ("target", "method", "body_json", "component", "before_watts", "after_watts", "status", "duration_ms", "note")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    BODY_JSON_FIELD_NUMBER: _ClassVar[int]
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_WATTS_FIELD_NUMBER: _ClassVar[int]
    AFTER_WATTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    target: str
    method: str
    body_json: str
    component: str
    before_watts: float
    after_watts: float
    status: str
    duration_ms: float
    note: str
    def __init__(self, target: _Optional[str] = ..., method: _Optional[str] = ..., body_json: _Optional[str] = ..., component: _Optional[str] = ..., before_watts: _Optional[float] = ..., after_watts: _Optional[float] = ..., status: _Optional[str] = ..., duration_ms: _Optional[float] = ..., note: _Optional[str] = ...) -> None: ...

class GetRequestRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ListRequestsRequest(_message.Message):
    __slots__ = ("device", "status", "undelivered_only", "limit", "dead_letter_only", "outcome", "kind", "trace_id", "page_size", "page_token", "selector")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_ONLY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    device: str
    status: RequestStatus
    undelivered_only: bool
    limit: int
    dead_letter_only: bool
    outcome: str
    kind: str
    trace_id: str
    page_size: int
    page_token: str
    selector: str
    def __init__(self, device: _Optional[str] = ..., status: _Optional[_Union[RequestStatus, str]] = ..., undelivered_only: _Optional[bool] = ..., limit: _Optional[int] = ..., dead_letter_only: _Optional[bool] = ..., outcome: _Optional[str] = ..., kind: _Optional[str] = ..., trace_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., selector: _Optional[str] = ...) -> None: ...

class ListRequestsResponse(_message.Message):
    __slots__ = ("requests", "next_page_token")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[RequestRecord]
    next_page_token: str
    def __init__(self, requests: _Optional[_Iterable[_Union[RequestRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WaitRequestRequest(_message.Message):
    __slots__ = ("request_id", "wait_for_delivery")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    wait_for_delivery: bool
    def __init__(self, request_id: _Optional[str] = ..., wait_for_delivery: _Optional[bool] = ...) -> None: ...

class DeviceRecord(_message.Message):
    __slots__ = ("id", "plugin", "model_json", "state_json", "state_version", "created_at", "updated_at", "last_request_id", "last_kind", "last_outcome", "last_error", "queued", "in_inventory", "desired", "in_force", "labels", "health")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    MODEL_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_KIND_FIELD_NUMBER: _ClassVar[int]
    LAST_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    IN_INVENTORY_FIELD_NUMBER: _ClassVar[int]
    DESIRED_FIELD_NUMBER: _ClassVar[int]
    IN_FORCE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    id: str
    plugin: str
    model_json: bytes
    state_json: bytes
    state_version: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    last_request_id: str
    last_kind: str
    last_outcome: str
    last_error: str
    queued: int
    in_inventory: bool
    desired: _containers.RepeatedCompositeFieldContainer[DesiredLimit]
    in_force: InForceView
    labels: _containers.ScalarMap[str, str]
    health: BmcHealth
    def __init__(self, id: _Optional[str] = ..., plugin: _Optional[str] = ..., model_json: _Optional[bytes] = ..., state_json: _Optional[bytes] = ..., state_version: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_request_id: _Optional[str] = ..., last_kind: _Optional[str] = ..., last_outcome: _Optional[str] = ..., last_error: _Optional[str] = ..., queued: _Optional[int] = ..., in_inventory: _Optional[bool] = ..., desired: _Optional[_Iterable[_Union[DesiredLimit, _Mapping]]] = ..., in_force: _Optional[_Union[InForceView, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., health: _Optional[_Union[BmcHealth, _Mapping]] = ...) -> None: ...

class ComponentInForce(_message.Message):
    __slots__ = ("component", "requested_watts", "enforced_watts", "min_watts", "max_watts", "drift", "changed_at", "capped", "removed")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_WATTS_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_WATTS_FIELD_NUMBER: _ClassVar[int]
    MIN_WATTS_FIELD_NUMBER: _ClassVar[int]
    MAX_WATTS_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_AT_FIELD_NUMBER: _ClassVar[int]
    CAPPED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    component: str
    requested_watts: float
    enforced_watts: float
    min_watts: float
    max_watts: float
    drift: str
    changed_at: str
    capped: bool
    removed: bool
    def __init__(self, component: _Optional[str] = ..., requested_watts: _Optional[float] = ..., enforced_watts: _Optional[float] = ..., min_watts: _Optional[float] = ..., max_watts: _Optional[float] = ..., drift: _Optional[str] = ..., changed_at: _Optional[str] = ..., capped: _Optional[bool] = ..., removed: _Optional[bool] = ...) -> None: ...

class ProfileIds(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class InForceView(_message.Message):
    __slots__ = ("components", "resource_groups", "policies", "profiles", "unknown_reason", "source")
    class PoliciesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ProfilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ProfileIds
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ProfileIds, _Mapping]] = ...) -> None: ...
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    components: _containers.RepeatedCompositeFieldContainer[ComponentInForce]
    resource_groups: _containers.RepeatedScalarFieldContainer[str]
    policies: _containers.ScalarMap[str, str]
    profiles: _containers.MessageMap[str, ProfileIds]
    unknown_reason: str
    source: str
    def __init__(self, components: _Optional[_Iterable[_Union[ComponentInForce, _Mapping]]] = ..., resource_groups: _Optional[_Iterable[str]] = ..., policies: _Optional[_Mapping[str, str]] = ..., profiles: _Optional[_Mapping[str, ProfileIds]] = ..., unknown_reason: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class BmcHealth(_message.Message):
    __slots__ = ("device", "last_success_at", "inaccessible_since", "last_error", "last_error_at", "sync_in_progress", "cert_not_after", "in_inventory")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    LAST_SUCCESS_AT_FIELD_NUMBER: _ClassVar[int]
    INACCESSIBLE_SINCE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_AT_FIELD_NUMBER: _ClassVar[int]
    SYNC_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CERT_NOT_AFTER_FIELD_NUMBER: _ClassVar[int]
    IN_INVENTORY_FIELD_NUMBER: _ClassVar[int]
    device: str
    last_success_at: _timestamp_pb2.Timestamp
    inaccessible_since: _timestamp_pb2.Timestamp
    last_error: str
    last_error_at: _timestamp_pb2.Timestamp
    sync_in_progress: bool
    cert_not_after: _timestamp_pb2.Timestamp
    in_inventory: bool
    def __init__(self, device: _Optional[str] = ..., last_success_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., inaccessible_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_error: _Optional[str] = ..., last_error_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sync_in_progress: _Optional[bool] = ..., cert_not_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., in_inventory: _Optional[bool] = ...) -> None: ...

class ListBmcHealthRequest(_message.Message):
    __slots__ = ("limit", "unreachable", "page_size", "page_token", "selector")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    limit: int
    unreachable: bool
    page_size: int
    page_token: str
    selector: str
    def __init__(self, limit: _Optional[int] = ..., unreachable: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., selector: _Optional[str] = ...) -> None: ...

class ListBmcHealthResponse(_message.Message):
    __slots__ = ("devices", "next_page_token")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[BmcHealth]
    next_page_token: str
    def __init__(self, devices: _Optional[_Iterable[_Union[BmcHealth, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class FleetSummary(_message.Message):
    __slots__ = ("nodes", "drifted", "unreachable", "unverified", "never_checked")
    NODES_FIELD_NUMBER: _ClassVar[int]
    DRIFTED_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    UNVERIFIED_FIELD_NUMBER: _ClassVar[int]
    NEVER_CHECKED_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    drifted: int
    unreachable: int
    unverified: int
    never_checked: int
    def __init__(self, nodes: _Optional[int] = ..., drifted: _Optional[int] = ..., unreachable: _Optional[int] = ..., unverified: _Optional[int] = ..., never_checked: _Optional[int] = ...) -> None: ...

class DesiredLimit(_message.Message):
    __slots__ = ("component", "desired_watts", "request_id", "set_at", "enforced_watts", "checked_at", "drift_at", "drift_detail")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    DESIRED_WATTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SET_AT_FIELD_NUMBER: _ClassVar[int]
    ENFORCED_WATTS_FIELD_NUMBER: _ClassVar[int]
    CHECKED_AT_FIELD_NUMBER: _ClassVar[int]
    DRIFT_AT_FIELD_NUMBER: _ClassVar[int]
    DRIFT_DETAIL_FIELD_NUMBER: _ClassVar[int]
    component: str
    desired_watts: float
    request_id: str
    set_at: _timestamp_pb2.Timestamp
    enforced_watts: float
    checked_at: _timestamp_pb2.Timestamp
    drift_at: _timestamp_pb2.Timestamp
    drift_detail: str
    def __init__(self, component: _Optional[str] = ..., desired_watts: _Optional[float] = ..., request_id: _Optional[str] = ..., set_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., enforced_watts: _Optional[float] = ..., checked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., drift_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., drift_detail: _Optional[str] = ...) -> None: ...

class GetDeviceRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ("limit", "page_size", "page_token", "selector", "include_state")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_size: int
    page_token: str
    selector: str
    include_state: bool
    def __init__(self, limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., selector: _Optional[str] = ..., include_state: _Optional[bool] = ...) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices", "next_page_token")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[DeviceRecord]
    next_page_token: str
    def __init__(self, devices: _Optional[_Iterable[_Union[DeviceRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class VerificationRecord(_message.Message):
    __slots__ = ("verification_id", "device", "request_id", "kind", "status", "detail", "created_at", "due_at", "finished_at")
    VERIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    verification_id: str
    device: str
    request_id: str
    kind: str
    status: str
    detail: str
    created_at: _timestamp_pb2.Timestamp
    due_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, verification_id: _Optional[str] = ..., device: _Optional[str] = ..., request_id: _Optional[str] = ..., kind: _Optional[str] = ..., status: _Optional[str] = ..., detail: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., due_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListVerificationsRequest(_message.Message):
    __slots__ = ("device", "verification_id", "limit", "page_size", "page_token", "selector")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    device: str
    verification_id: str
    limit: int
    page_size: int
    page_token: str
    selector: str
    def __init__(self, device: _Optional[str] = ..., verification_id: _Optional[str] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., selector: _Optional[str] = ...) -> None: ...

class ListVerificationsResponse(_message.Message):
    __slots__ = ("verifications", "next_page_token")
    VERIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    verifications: _containers.RepeatedCompositeFieldContainer[VerificationRecord]
    next_page_token: str
    def __init__(self, verifications: _Optional[_Iterable[_Union[VerificationRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PluginInfo(_message.Message):
    __slots__ = ("name", "version", "vendor", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VENDOR_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    vendor: str
    source: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., vendor: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class ListPluginsResponse(_message.Message):
    __slots__ = ("plugins",)
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedCompositeFieldContainer[PluginInfo]
    def __init__(self, plugins: _Optional[_Iterable[_Union[PluginInfo, _Mapping]]] = ...) -> None: ...

class ControllerStatus(_message.Message):
    __slots__ = ("journal_ok", "journal_error", "journal_error_since", "callback_ok", "callback_error", "callback_error_since", "undelivered", "dead_letters", "delivered", "dead_lettered", "processes", "shadow", "warmup", "fleet")
    JOURNAL_OK_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ERROR_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ERROR_SINCE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_OK_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_ERROR_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_ERROR_SINCE_FIELD_NUMBER: _ClassVar[int]
    UNDELIVERED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    FLEET_FIELD_NUMBER: _ClassVar[int]
    journal_ok: bool
    journal_error: str
    journal_error_since: _timestamp_pb2.Timestamp
    callback_ok: bool
    callback_error: str
    callback_error_since: _timestamp_pb2.Timestamp
    undelivered: int
    dead_letters: int
    delivered: int
    dead_lettered: int
    processes: _containers.RepeatedCompositeFieldContainer[ProcessStatus]
    shadow: bool
    warmup: WarmupStatus
    fleet: FleetSummary
    def __init__(self, journal_ok: _Optional[bool] = ..., journal_error: _Optional[str] = ..., journal_error_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., callback_ok: _Optional[bool] = ..., callback_error: _Optional[str] = ..., callback_error_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., undelivered: _Optional[int] = ..., dead_letters: _Optional[int] = ..., delivered: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., processes: _Optional[_Iterable[_Union[ProcessStatus, _Mapping]]] = ..., shadow: _Optional[bool] = ..., warmup: _Optional[_Union[WarmupStatus, _Mapping]] = ..., fleet: _Optional[_Union[FleetSummary, _Mapping]] = ...) -> None: ...

class WarmupStatus(_message.Message):
    __slots__ = ("total", "done", "failed", "skipped", "finished")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    total: int
    done: int
    failed: int
    skipped: int
    finished: bool
    def __init__(self, total: _Optional[int] = ..., done: _Optional[int] = ..., failed: _Optional[int] = ..., skipped: _Optional[int] = ..., finished: _Optional[bool] = ...) -> None: ...

class ProcessStatus(_message.Message):
    __slots__ = ("instance_id", "callback_ok", "callback_error", "callback_error_since", "delivered", "dead_lettered", "report_age_seconds", "not_running")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_OK_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_ERROR_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_ERROR_SINCE_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    REPORT_AGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOT_RUNNING_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    callback_ok: bool
    callback_error: str
    callback_error_since: _timestamp_pb2.Timestamp
    delivered: int
    dead_lettered: int
    report_age_seconds: float
    not_running: str
    def __init__(self, instance_id: _Optional[str] = ..., callback_ok: _Optional[bool] = ..., callback_error: _Optional[str] = ..., callback_error_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivered: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., report_age_seconds: _Optional[float] = ..., not_running: _Optional[str] = ...) -> None: ...

class DryRunResponse(_message.Message):
    __slots__ = ("writes", "response", "ok", "error")
    WRITES_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    writes: _containers.RepeatedCompositeFieldContainer[DeviceWrite]
    response: _devicecontroller_pb2.DeviceControllerResponse
    ok: bool
    error: str
    def __init__(self, writes: _Optional[_Iterable[_Union[DeviceWrite, _Mapping]]] = ..., response: _Optional[_Union[_devicecontroller_pb2.DeviceControllerResponse, _Mapping]] = ..., ok: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class StartVerifyRequest(_message.Message):
    __slots__ = ("devices", "all", "model", "samples_per_telemetry", "telemetry_interval_ms", "write_resolution_timeout_ms", "latency_samples", "latency_p95_ms", "force", "selector")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    WRITE_RESOLUTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LATENCY_P95_MS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedScalarFieldContainer[str]
    all: bool
    model: str
    samples_per_telemetry: int
    telemetry_interval_ms: int
    write_resolution_timeout_ms: int
    latency_samples: int
    latency_p95_ms: float
    force: bool
    selector: str
    def __init__(self, devices: _Optional[_Iterable[str]] = ..., all: _Optional[bool] = ..., model: _Optional[str] = ..., samples_per_telemetry: _Optional[int] = ..., telemetry_interval_ms: _Optional[int] = ..., write_resolution_timeout_ms: _Optional[int] = ..., latency_samples: _Optional[int] = ..., latency_p95_ms: _Optional[float] = ..., force: _Optional[bool] = ..., selector: _Optional[str] = ...) -> None: ...

class BmcCheckRecord(_message.Message):
    __slots__ = ("check_id", "batch_id", "device", "write_cycle", "status", "verdict", "error", "result_json", "writes", "created_at", "started_at", "finished_at")
    CHECK_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    WRITE_CYCLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    check_id: str
    batch_id: str
    device: str
    write_cycle: bool
    status: str
    verdict: str
    error: str
    result_json: str
    writes: _containers.RepeatedCompositeFieldContainer[DeviceWrite]
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    def __init__(self, check_id: _Optional[str] = ..., batch_id: _Optional[str] = ..., device: _Optional[str] = ..., write_cycle: _Optional[bool] = ..., status: _Optional[str] = ..., verdict: _Optional[str] = ..., error: _Optional[str] = ..., result_json: _Optional[str] = ..., writes: _Optional[_Iterable[_Union[DeviceWrite, _Mapping]]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class VerifyBatch(_message.Message):
    __slots__ = ("checks", "next_page_token", "batch_id", "progress")
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedCompositeFieldContainer[BmcCheckRecord]
    next_page_token: str
    batch_id: str
    progress: VerifyProgress
    def __init__(self, checks: _Optional[_Iterable[_Union[BmcCheckRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., batch_id: _Optional[str] = ..., progress: _Optional[_Union[VerifyProgress, _Mapping]] = ...) -> None: ...

class VerifyProgress(_message.Message):
    __slots__ = ("total", "queued", "running", "done", "failed", "interrupted", "passed", "warned", "failed_checks")
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    WARNED_FIELD_NUMBER: _ClassVar[int]
    FAILED_CHECKS_FIELD_NUMBER: _ClassVar[int]
    total: int
    queued: int
    running: int
    done: int
    failed: int
    interrupted: int
    passed: int
    warned: int
    failed_checks: int
    def __init__(self, total: _Optional[int] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., done: _Optional[int] = ..., failed: _Optional[int] = ..., interrupted: _Optional[int] = ..., passed: _Optional[int] = ..., warned: _Optional[int] = ..., failed_checks: _Optional[int] = ...) -> None: ...

class ListBmcChecksRequest(_message.Message):
    __slots__ = ("device", "status", "limit", "page_size", "page_token", "selector")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    device: str
    status: str
    limit: int
    page_size: int
    page_token: str
    selector: str
    def __init__(self, device: _Optional[str] = ..., status: _Optional[str] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., selector: _Optional[str] = ...) -> None: ...

class GetBmcCheckRequest(_message.Message):
    __slots__ = ("id", "page_size", "page_token", "progress_only")
    ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_ONLY_FIELD_NUMBER: _ClassVar[int]
    id: str
    page_size: int
    page_token: str
    progress_only: bool
    def __init__(self, id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., progress_only: _Optional[bool] = ...) -> None: ...
