import datetime

from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from controller._proto.devicecontroller.v1 import metrics_pb2 as _metrics_pb2
from controller._proto.devicecontroller.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceControllerRequest(_message.Message):
    __slots__ = ("device", "request_id", "timeout_seconds", "device_model_json", "device_state_json", "trace_id", "resource_group_activate", "resource_group_deactivate", "resource_group_update", "topology_activate", "topology_deactivate", "gpu_policies_update", "enable_workload_profile", "disable_workload_profile", "update_workload_profile", "ping", "gpu_metrics", "raw_metrics", "std_metrics", "modify_entity_model", "bmc_health")
    class PolicyAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        POLICY_ACTION_UNSPECIFIED: _ClassVar[DeviceControllerRequest.PolicyAction]
        SET_POLICY: _ClassVar[DeviceControllerRequest.PolicyAction]
        UNSET_POLICY: _ClassVar[DeviceControllerRequest.PolicyAction]
    POLICY_ACTION_UNSPECIFIED: DeviceControllerRequest.PolicyAction
    SET_POLICY: DeviceControllerRequest.PolicyAction
    UNSET_POLICY: DeviceControllerRequest.PolicyAction
    class AllocationRequest(_message.Message):
        __slots__ = ("resource_group", "policy", "gpu_policies", "workload_profiles")
        RESOURCE_GROUP_FIELD_NUMBER: _ClassVar[int]
        POLICY_FIELD_NUMBER: _ClassVar[int]
        GPU_POLICIES_FIELD_NUMBER: _ClassVar[int]
        WORKLOAD_PROFILES_FIELD_NUMBER: _ClassVar[int]
        resource_group: str
        policy: DeviceControllerRequest.PolicySetRequest
        gpu_policies: DeviceControllerRequest.GPUPoliciesSetRequest
        workload_profiles: DeviceControllerRequest.PowerProfileRequest
        def __init__(self, resource_group: _Optional[str] = ..., policy: _Optional[_Union[DeviceControllerRequest.PolicySetRequest, _Mapping]] = ..., gpu_policies: _Optional[_Union[DeviceControllerRequest.GPUPoliciesSetRequest, _Mapping]] = ..., workload_profiles: _Optional[_Union[DeviceControllerRequest.PowerProfileRequest, _Mapping]] = ...) -> None: ...
    class EntityModificationRequest(_message.Message):
        __slots__ = ("phase", "old_device_model", "old_default_policy", "new_device_model", "new_default_policy", "resource_group")
        PHASE_FIELD_NUMBER: _ClassVar[int]
        OLD_DEVICE_MODEL_FIELD_NUMBER: _ClassVar[int]
        OLD_DEFAULT_POLICY_FIELD_NUMBER: _ClassVar[int]
        NEW_DEVICE_MODEL_FIELD_NUMBER: _ClassVar[int]
        NEW_DEFAULT_POLICY_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_GROUP_FIELD_NUMBER: _ClassVar[int]
        phase: int
        old_device_model: bytes
        old_default_policy: _policy_pb2.PolicyObject
        new_device_model: bytes
        new_default_policy: _policy_pb2.PolicyObject
        resource_group: str
        def __init__(self, phase: _Optional[int] = ..., old_device_model: _Optional[bytes] = ..., old_default_policy: _Optional[_Union[_policy_pb2.PolicyObject, _Mapping]] = ..., new_device_model: _Optional[bytes] = ..., new_default_policy: _Optional[_Union[_policy_pb2.PolicyObject, _Mapping]] = ..., resource_group: _Optional[str] = ...) -> None: ...
    class GPUMetricsRequest(_message.Message):
        __slots__ = ("gpu_ids",)
        GPU_IDS_FIELD_NUMBER: _ClassVar[int]
        gpu_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, gpu_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    class GPUPoliciesSetRequest(_message.Message):
        __slots__ = ("resource_group", "gpu_policy_action", "current_policy", "gpu_policies")
        RESOURCE_GROUP_FIELD_NUMBER: _ClassVar[int]
        GPU_POLICY_ACTION_FIELD_NUMBER: _ClassVar[int]
        CURRENT_POLICY_FIELD_NUMBER: _ClassVar[int]
        GPU_POLICIES_FIELD_NUMBER: _ClassVar[int]
        resource_group: str
        gpu_policy_action: DeviceControllerRequest.PolicyAction
        current_policy: _policy_pb2.PolicyObject
        gpu_policies: _policy_pb2.GPUPolicies
        def __init__(self, resource_group: _Optional[str] = ..., gpu_policy_action: _Optional[_Union[DeviceControllerRequest.PolicyAction, str]] = ..., current_policy: _Optional[_Union[_policy_pb2.PolicyObject, _Mapping]] = ..., gpu_policies: _Optional[_Union[_policy_pb2.GPUPolicies, _Mapping]] = ...) -> None: ...
    class PingRequest(_message.Message):
        __slots__ = ("retry_count",)
        RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
        retry_count: int
        def __init__(self, retry_count: _Optional[int] = ...) -> None: ...
    class PolicySetRequest(_message.Message):
        __slots__ = ("policy_action", "policy")
        POLICY_ACTION_FIELD_NUMBER: _ClassVar[int]
        POLICY_FIELD_NUMBER: _ClassVar[int]
        policy_action: DeviceControllerRequest.PolicyAction
        policy: _policy_pb2.PolicyObject
        def __init__(self, policy_action: _Optional[_Union[DeviceControllerRequest.PolicyAction, str]] = ..., policy: _Optional[_Union[_policy_pb2.PolicyObject, _Mapping]] = ...) -> None: ...
    class PowerProfileRequest(_message.Message):
        __slots__ = ("enable_profile_ids", "disable_profile_ids", "disable_async_verification")
        ENABLE_PROFILE_IDS_FIELD_NUMBER: _ClassVar[int]
        DISABLE_PROFILE_IDS_FIELD_NUMBER: _ClassVar[int]
        DISABLE_ASYNC_VERIFICATION_FIELD_NUMBER: _ClassVar[int]
        enable_profile_ids: _containers.RepeatedScalarFieldContainer[int]
        disable_profile_ids: _containers.RepeatedScalarFieldContainer[int]
        disable_async_verification: bool
        def __init__(self, enable_profile_ids: _Optional[_Iterable[int]] = ..., disable_profile_ids: _Optional[_Iterable[int]] = ..., disable_async_verification: _Optional[bool] = ...) -> None: ...
    class BMCHealthDeviceRequest(_message.Message):
        __slots__ = ("samples_per_telemetry", "skip_writes", "telemetry_interval_ms", "write_resolution_timeout_ms", "write_cycle")
        SAMPLES_PER_TELEMETRY_FIELD_NUMBER: _ClassVar[int]
        SKIP_WRITES_FIELD_NUMBER: _ClassVar[int]
        TELEMETRY_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
        WRITE_RESOLUTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
        WRITE_CYCLE_FIELD_NUMBER: _ClassVar[int]
        samples_per_telemetry: int
        skip_writes: bool
        telemetry_interval_ms: int
        write_resolution_timeout_ms: int
        write_cycle: bool
        def __init__(self, samples_per_telemetry: _Optional[int] = ..., skip_writes: _Optional[bool] = ..., telemetry_interval_ms: _Optional[int] = ..., write_resolution_timeout_ms: _Optional[int] = ..., write_cycle: _Optional[bool] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_MODEL_JSON_FIELD_NUMBER: _ClassVar[int]
    DEVICE_STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_UPDATE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    GPU_POLICIES_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ENABLE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    GPU_METRICS_FIELD_NUMBER: _ClassVar[int]
    RAW_METRICS_FIELD_NUMBER: _ClassVar[int]
    STD_METRICS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_ENTITY_MODEL_FIELD_NUMBER: _ClassVar[int]
    BMC_HEALTH_FIELD_NUMBER: _ClassVar[int]
    device: str
    request_id: str
    timeout_seconds: int
    device_model_json: bytes
    device_state_json: bytes
    trace_id: str
    resource_group_activate: DeviceControllerRequest.AllocationRequest
    resource_group_deactivate: DeviceControllerRequest.AllocationRequest
    resource_group_update: DeviceControllerRequest.AllocationRequest
    topology_activate: DeviceControllerRequest.PolicySetRequest
    topology_deactivate: DeviceControllerRequest.PolicySetRequest
    gpu_policies_update: DeviceControllerRequest.GPUPoliciesSetRequest
    enable_workload_profile: DeviceControllerRequest.PowerProfileRequest
    disable_workload_profile: DeviceControllerRequest.PowerProfileRequest
    update_workload_profile: DeviceControllerRequest.PowerProfileRequest
    ping: DeviceControllerRequest.PingRequest
    gpu_metrics: DeviceControllerRequest.GPUMetricsRequest
    raw_metrics: _empty_pb2.Empty
    std_metrics: _empty_pb2.Empty
    modify_entity_model: DeviceControllerRequest.EntityModificationRequest
    bmc_health: DeviceControllerRequest.BMCHealthDeviceRequest
    def __init__(self, device: _Optional[str] = ..., request_id: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., device_model_json: _Optional[bytes] = ..., device_state_json: _Optional[bytes] = ..., trace_id: _Optional[str] = ..., resource_group_activate: _Optional[_Union[DeviceControllerRequest.AllocationRequest, _Mapping]] = ..., resource_group_deactivate: _Optional[_Union[DeviceControllerRequest.AllocationRequest, _Mapping]] = ..., resource_group_update: _Optional[_Union[DeviceControllerRequest.AllocationRequest, _Mapping]] = ..., topology_activate: _Optional[_Union[DeviceControllerRequest.PolicySetRequest, _Mapping]] = ..., topology_deactivate: _Optional[_Union[DeviceControllerRequest.PolicySetRequest, _Mapping]] = ..., gpu_policies_update: _Optional[_Union[DeviceControllerRequest.GPUPoliciesSetRequest, _Mapping]] = ..., enable_workload_profile: _Optional[_Union[DeviceControllerRequest.PowerProfileRequest, _Mapping]] = ..., disable_workload_profile: _Optional[_Union[DeviceControllerRequest.PowerProfileRequest, _Mapping]] = ..., update_workload_profile: _Optional[_Union[DeviceControllerRequest.PowerProfileRequest, _Mapping]] = ..., ping: _Optional[_Union[DeviceControllerRequest.PingRequest, _Mapping]] = ..., gpu_metrics: _Optional[_Union[DeviceControllerRequest.GPUMetricsRequest, _Mapping]] = ..., raw_metrics: _Optional[_Union[_empty_pb2.Empty, _Mapping]] = ..., std_metrics: _Optional[_Union[_empty_pb2.Empty, _Mapping]] = ..., modify_entity_model: _Optional[_Union[DeviceControllerRequest.EntityModificationRequest, _Mapping]] = ..., bmc_health: _Optional[_Union[DeviceControllerRequest.BMCHealthDeviceRequest, _Mapping]] = ...) -> None: ...

class DeviceControllerResponse(_message.Message):
    __slots__ = ("device", "request_id", "device_state_json", "device_ping_time", "device_ping_error", "trace_id", "resource_group_activate", "resource_group_deactivate", "resource_group_update", "topology_activate", "topology_deactivate", "gpu_policies_update", "enable_workload_profile", "disable_workload_profile", "update_workload_profile", "ping", "gpu_metrics", "raw_metrics", "std_metrics", "modify_entity_model", "bmc_health")
    class AllocationResponse(_message.Message):
        __slots__ = ("success", "error", "policy", "power_cap_watts", "allocated_gpu_policies", "workload_profile_result", "resource_group", "allocated_node_policy", "allocated_cpu_policy", "allocated_memory_policy")
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        POLICY_FIELD_NUMBER: _ClassVar[int]
        POWER_CAP_WATTS_FIELD_NUMBER: _ClassVar[int]
        ALLOCATED_GPU_POLICIES_FIELD_NUMBER: _ClassVar[int]
        WORKLOAD_PROFILE_RESULT_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_GROUP_FIELD_NUMBER: _ClassVar[int]
        ALLOCATED_NODE_POLICY_FIELD_NUMBER: _ClassVar[int]
        ALLOCATED_CPU_POLICY_FIELD_NUMBER: _ClassVar[int]
        ALLOCATED_MEMORY_POLICY_FIELD_NUMBER: _ClassVar[int]
        success: bool
        error: str
        policy: _policy_pb2.PolicyObject
        power_cap_watts: float
        allocated_gpu_policies: DeviceControllerResponse.GPUPoliciesUpdateResponse
        workload_profile_result: DeviceControllerResponse.PowerProfileResponse
        resource_group: str
        allocated_node_policy: DeviceControllerResponse.PolicyComponentResult
        allocated_cpu_policy: DeviceControllerResponse.PolicyComponentResult
        allocated_memory_policy: DeviceControllerResponse.PolicyComponentResult
        def __init__(self, success: _Optional[bool] = ..., error: _Optional[str] = ..., policy: _Optional[_Union[_policy_pb2.PolicyObject, _Mapping]] = ..., power_cap_watts: _Optional[float] = ..., allocated_gpu_policies: _Optional[_Union[DeviceControllerResponse.GPUPoliciesUpdateResponse, _Mapping]] = ..., workload_profile_result: _Optional[_Union[DeviceControllerResponse.PowerProfileResponse, _Mapping]] = ..., resource_group: _Optional[str] = ..., allocated_node_policy: _Optional[_Union[DeviceControllerResponse.PolicyComponentResult, _Mapping]] = ..., allocated_cpu_policy: _Optional[_Union[DeviceControllerResponse.PolicyComponentResult, _Mapping]] = ..., allocated_memory_policy: _Optional[_Union[DeviceControllerResponse.PolicyComponentResult, _Mapping]] = ...) -> None: ...
    class EntityModificationResponse(_message.Message):
        __slots__ = ("response", "diag_msg")
        class Response(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            RESPONSE_UNSPECIFIED: _ClassVar[DeviceControllerResponse.EntityModificationResponse.Response]
            ACCEPTED: _ClassVar[DeviceControllerResponse.EntityModificationResponse.Response]
            ACCEPTED_CALL_PHASE_1: _ClassVar[DeviceControllerResponse.EntityModificationResponse.Response]
            REJECTED: _ClassVar[DeviceControllerResponse.EntityModificationResponse.Response]
        RESPONSE_UNSPECIFIED: DeviceControllerResponse.EntityModificationResponse.Response
        ACCEPTED: DeviceControllerResponse.EntityModificationResponse.Response
        ACCEPTED_CALL_PHASE_1: DeviceControllerResponse.EntityModificationResponse.Response
        REJECTED: DeviceControllerResponse.EntityModificationResponse.Response
        RESPONSE_FIELD_NUMBER: _ClassVar[int]
        DIAG_MSG_FIELD_NUMBER: _ClassVar[int]
        response: DeviceControllerResponse.EntityModificationResponse.Response
        diag_msg: str
        def __init__(self, response: _Optional[_Union[DeviceControllerResponse.EntityModificationResponse.Response, str]] = ..., diag_msg: _Optional[str] = ...) -> None: ...
    class GPUMetricsResponse(_message.Message):
        __slots__ = ("metrics", "success", "error")
        class GPUMetrics(_message.Message):
            __slots__ = ("gpu_id", "usage")
            GPU_ID_FIELD_NUMBER: _ClassVar[int]
            USAGE_FIELD_NUMBER: _ClassVar[int]
            gpu_id: int
            usage: float
            def __init__(self, gpu_id: _Optional[int] = ..., usage: _Optional[float] = ...) -> None: ...
        METRICS_FIELD_NUMBER: _ClassVar[int]
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        metrics: _containers.RepeatedCompositeFieldContainer[DeviceControllerResponse.GPUMetricsResponse.GPUMetrics]
        success: bool
        error: str
        def __init__(self, metrics: _Optional[_Iterable[_Union[DeviceControllerResponse.GPUMetricsResponse.GPUMetrics, _Mapping]]] = ..., success: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
    class GPUPoliciesUpdateResponse(_message.Message):
        __slots__ = ("results", "resource_group")
        RESULTS_FIELD_NUMBER: _ClassVar[int]
        RESOURCE_GROUP_FIELD_NUMBER: _ClassVar[int]
        results: _containers.RepeatedCompositeFieldContainer[DeviceControllerResponse.GPUPolicyResult]
        resource_group: str
        def __init__(self, results: _Optional[_Iterable[_Union[DeviceControllerResponse.GPUPolicyResult, _Mapping]]] = ..., resource_group: _Optional[str] = ...) -> None: ...
    class GPUPolicyResult(_message.Message):
        __slots__ = ("gpu_id", "ok", "power_cap_watts", "diag_msg")
        GPU_ID_FIELD_NUMBER: _ClassVar[int]
        OK_FIELD_NUMBER: _ClassVar[int]
        POWER_CAP_WATTS_FIELD_NUMBER: _ClassVar[int]
        DIAG_MSG_FIELD_NUMBER: _ClassVar[int]
        gpu_id: int
        ok: bool
        power_cap_watts: float
        diag_msg: str
        def __init__(self, gpu_id: _Optional[int] = ..., ok: _Optional[bool] = ..., power_cap_watts: _Optional[float] = ..., diag_msg: _Optional[str] = ...) -> None: ...
    class GPUProfileStatus(_message.Message):
        __slots__ = ("gpu_id", "success", "enforced_workload_profile_ids", "diag_msg")
        GPU_ID_FIELD_NUMBER: _ClassVar[int]
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ENFORCED_WORKLOAD_PROFILE_IDS_FIELD_NUMBER: _ClassVar[int]
        DIAG_MSG_FIELD_NUMBER: _ClassVar[int]
        gpu_id: str
        success: bool
        enforced_workload_profile_ids: _containers.RepeatedScalarFieldContainer[int]
        diag_msg: str
        def __init__(self, gpu_id: _Optional[str] = ..., success: _Optional[bool] = ..., enforced_workload_profile_ids: _Optional[_Iterable[int]] = ..., diag_msg: _Optional[str] = ...) -> None: ...
    class PingResponse(_message.Message):
        __slots__ = ("success", "error")
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        success: bool
        error: str
        def __init__(self, success: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
    class PolicyComponentResult(_message.Message):
        __slots__ = ("ok", "power_cap_watts", "diag_msg")
        OK_FIELD_NUMBER: _ClassVar[int]
        POWER_CAP_WATTS_FIELD_NUMBER: _ClassVar[int]
        DIAG_MSG_FIELD_NUMBER: _ClassVar[int]
        ok: bool
        power_cap_watts: float
        diag_msg: str
        def __init__(self, ok: _Optional[bool] = ..., power_cap_watts: _Optional[float] = ..., diag_msg: _Optional[str] = ...) -> None: ...
    class PowerProfileResponse(_message.Message):
        __slots__ = ("success", "error", "gpu_statuses", "verification_id")
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        GPU_STATUSES_FIELD_NUMBER: _ClassVar[int]
        VERIFICATION_ID_FIELD_NUMBER: _ClassVar[int]
        success: bool
        error: str
        gpu_statuses: _containers.RepeatedCompositeFieldContainer[DeviceControllerResponse.GPUProfileStatus]
        verification_id: str
        def __init__(self, success: _Optional[bool] = ..., error: _Optional[str] = ..., gpu_statuses: _Optional[_Iterable[_Union[DeviceControllerResponse.GPUProfileStatus, _Mapping]]] = ..., verification_id: _Optional[str] = ...) -> None: ...
    class RawMetricsResponse(_message.Message):
        __slots__ = ("raw_metrics", "success", "error")
        RAW_METRICS_FIELD_NUMBER: _ClassVar[int]
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        raw_metrics: _any_pb2.Any
        success: bool
        error: str
        def __init__(self, raw_metrics: _Optional[_Union[_any_pb2.Any, _Mapping]] = ..., success: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
    class StdMetricsResponse(_message.Message):
        __slots__ = ("metrics", "success", "error")
        METRICS_FIELD_NUMBER: _ClassVar[int]
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        metrics: _metrics_pb2.NodeMetricsResponse
        success: bool
        error: str
        def __init__(self, metrics: _Optional[_Union[_metrics_pb2.NodeMetricsResponse, _Mapping]] = ..., success: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
    class BMCHealthResponse(_message.Message):
        __slots__ = ("success", "error", "verdict", "checks")
        class Check(_message.Message):
            __slots__ = ("name", "status", "detail", "evidence_json")
            NAME_FIELD_NUMBER: _ClassVar[int]
            STATUS_FIELD_NUMBER: _ClassVar[int]
            DETAIL_FIELD_NUMBER: _ClassVar[int]
            EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
            name: str
            status: str
            detail: str
            evidence_json: str
            def __init__(self, name: _Optional[str] = ..., status: _Optional[str] = ..., detail: _Optional[str] = ..., evidence_json: _Optional[str] = ...) -> None: ...
        SUCCESS_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        VERDICT_FIELD_NUMBER: _ClassVar[int]
        CHECKS_FIELD_NUMBER: _ClassVar[int]
        success: bool
        error: str
        verdict: str
        checks: _containers.RepeatedCompositeFieldContainer[DeviceControllerResponse.BMCHealthResponse.Check]
        def __init__(self, success: _Optional[bool] = ..., error: _Optional[str] = ..., verdict: _Optional[str] = ..., checks: _Optional[_Iterable[_Union[DeviceControllerResponse.BMCHealthResponse.Check, _Mapping]]] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    DEVICE_PING_TIME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_PING_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_GROUP_UPDATE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_ACTIVATE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_DEACTIVATE_FIELD_NUMBER: _ClassVar[int]
    GPU_POLICIES_UPDATE_FIELD_NUMBER: _ClassVar[int]
    ENABLE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    DISABLE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_WORKLOAD_PROFILE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    GPU_METRICS_FIELD_NUMBER: _ClassVar[int]
    RAW_METRICS_FIELD_NUMBER: _ClassVar[int]
    STD_METRICS_FIELD_NUMBER: _ClassVar[int]
    MODIFY_ENTITY_MODEL_FIELD_NUMBER: _ClassVar[int]
    BMC_HEALTH_FIELD_NUMBER: _ClassVar[int]
    device: str
    request_id: str
    device_state_json: bytes
    device_ping_time: _timestamp_pb2.Timestamp
    device_ping_error: str
    trace_id: str
    resource_group_activate: DeviceControllerResponse.AllocationResponse
    resource_group_deactivate: DeviceControllerResponse.AllocationResponse
    resource_group_update: DeviceControllerResponse.AllocationResponse
    topology_activate: DeviceControllerResponse.AllocationResponse
    topology_deactivate: DeviceControllerResponse.AllocationResponse
    gpu_policies_update: DeviceControllerResponse.GPUPoliciesUpdateResponse
    enable_workload_profile: DeviceControllerResponse.PowerProfileResponse
    disable_workload_profile: DeviceControllerResponse.PowerProfileResponse
    update_workload_profile: DeviceControllerResponse.PowerProfileResponse
    ping: DeviceControllerResponse.PingResponse
    gpu_metrics: DeviceControllerResponse.GPUMetricsResponse
    raw_metrics: DeviceControllerResponse.RawMetricsResponse
    std_metrics: DeviceControllerResponse.StdMetricsResponse
    modify_entity_model: DeviceControllerResponse.EntityModificationResponse
    bmc_health: DeviceControllerResponse.BMCHealthResponse
    def __init__(self, device: _Optional[str] = ..., request_id: _Optional[str] = ..., device_state_json: _Optional[bytes] = ..., device_ping_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., device_ping_error: _Optional[str] = ..., trace_id: _Optional[str] = ..., resource_group_activate: _Optional[_Union[DeviceControllerResponse.AllocationResponse, _Mapping]] = ..., resource_group_deactivate: _Optional[_Union[DeviceControllerResponse.AllocationResponse, _Mapping]] = ..., resource_group_update: _Optional[_Union[DeviceControllerResponse.AllocationResponse, _Mapping]] = ..., topology_activate: _Optional[_Union[DeviceControllerResponse.AllocationResponse, _Mapping]] = ..., topology_deactivate: _Optional[_Union[DeviceControllerResponse.AllocationResponse, _Mapping]] = ..., gpu_policies_update: _Optional[_Union[DeviceControllerResponse.GPUPoliciesUpdateResponse, _Mapping]] = ..., enable_workload_profile: _Optional[_Union[DeviceControllerResponse.PowerProfileResponse, _Mapping]] = ..., disable_workload_profile: _Optional[_Union[DeviceControllerResponse.PowerProfileResponse, _Mapping]] = ..., update_workload_profile: _Optional[_Union[DeviceControllerResponse.PowerProfileResponse, _Mapping]] = ..., ping: _Optional[_Union[DeviceControllerResponse.PingResponse, _Mapping]] = ..., gpu_metrics: _Optional[_Union[DeviceControllerResponse.GPUMetricsResponse, _Mapping]] = ..., raw_metrics: _Optional[_Union[DeviceControllerResponse.RawMetricsResponse, _Mapping]] = ..., std_metrics: _Optional[_Union[DeviceControllerResponse.StdMetricsResponse, _Mapping]] = ..., modify_entity_model: _Optional[_Union[DeviceControllerResponse.EntityModificationResponse, _Mapping]] = ..., bmc_health: _Optional[_Union[DeviceControllerResponse.BMCHealthResponse, _Mapping]] = ...) -> None: ...
