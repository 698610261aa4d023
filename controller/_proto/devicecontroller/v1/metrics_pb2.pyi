import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceMetrics(_message.Message):
    __slots__ = ("id", "power_usage", "energy_usage", "energy_usage_unit", "set_limit", "max_limit", "min_limit", "temperature_celsius")
    ID_FIELD_NUMBER: _ClassVar[int]
    POWER_USAGE_FIELD_NUMBER: _ClassVar[int]
    ENERGY_USAGE_FIELD_NUMBER: _ClassVar[int]
    ENERGY_USAGE_UNIT_FIELD_NUMBER: _ClassVar[int]
    SET_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    power_usage: float
    energy_usage: float
    energy_usage_unit: str
    set_limit: float
    max_limit: float
    min_limit: float
    temperature_celsius: float
    def __init__(self, id: _Optional[str] = ..., power_usage: _Optional[float] = ..., energy_usage: _Optional[float] = ..., energy_usage_unit: _Optional[str] = ..., set_limit: _Optional[float] = ..., max_limit: _Optional[float] = ..., min_limit: _Optional[float] = ..., temperature_celsius: _Optional[float] = ...) -> None: ...

class NodeMetricsResponse(_message.Message):
    __slots__ = ("name", "num_gpus", "num_cpus", "num_memory_units", "power_usage", "gpus", "cpus", "sampled_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    NUM_CPUS_FIELD_NUMBER: _ClassVar[int]
    NUM_MEMORY_UNITS_FIELD_NUMBER: _ClassVar[int]
    POWER_USAGE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_gpus: int
    num_cpus: int
    num_memory_units: int
    power_usage: float
    gpus: _containers.RepeatedCompositeFieldContainer[DeviceMetrics]
    cpus: _containers.RepeatedCompositeFieldContainer[DeviceMetrics]
    sampled_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., num_gpus: _Optional[int] = ..., num_cpus: _Optional[int] = ..., num_memory_units: _Optional[int] = ..., power_usage: _Optional[float] = ..., gpus: _Optional[_Iterable[_Union[DeviceMetrics, _Mapping]]] = ..., cpus: _Optional[_Iterable[_Union[DeviceMetrics, _Mapping]]] = ..., sampled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
