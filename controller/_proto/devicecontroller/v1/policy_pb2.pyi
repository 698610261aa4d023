from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PolicyElementType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMP_UNSPECIFIED: _ClassVar[PolicyElementType]
    COMP_NODE: _ClassVar[PolicyElementType]
    COMP_GPU: _ClassVar[PolicyElementType]
    COMP_CPU: _ClassVar[PolicyElementType]
    COMP_MEMORY: _ClassVar[PolicyElementType]
COMP_UNSPECIFIED: PolicyElementType
COMP_NODE: PolicyElementType
COMP_GPU: PolicyElementType
COMP_CPU: PolicyElementType
COMP_MEMORY: PolicyElementType

class PowerLimit(_message.Message):
    __slots__ = ("watts", "percentage")
    WATTS_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
    watts: float
    percentage: float
    def __init__(self, watts: _Optional[float] = ..., percentage: _Optional[float] = ...) -> None: ...

class PolicyLimit(_message.Message):
    __slots__ = ("element_type", "power_limit")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    element_type: PolicyElementType
    power_limit: PowerLimit
    def __init__(self, element_type: _Optional[_Union[PolicyElementType, str]] = ..., power_limit: _Optional[_Union[PowerLimit, _Mapping]] = ...) -> None: ...

class PolicyObject(_message.Message):
    __slots__ = ("name", "limits", "properties")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    limits: _containers.RepeatedCompositeFieldContainer[PolicyLimit]
    properties: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., limits: _Optional[_Iterable[_Union[PolicyLimit, _Mapping]]] = ..., properties: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GPUPolicy(_message.Message):
    __slots__ = ("gpu_id", "power_limit")
    GPU_ID_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    gpu_id: int
    power_limit: PowerLimit
    def __init__(self, gpu_id: _Optional[int] = ..., power_limit: _Optional[_Union[PowerLimit, _Mapping]] = ...) -> None: ...

class GPUPolicies(_message.Message):
    __slots__ = ("policies",)
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[GPUPolicy]
    def __init__(self, policies: _Optional[_Iterable[_Union[GPUPolicy, _Mapping]]] = ...) -> None: ...
