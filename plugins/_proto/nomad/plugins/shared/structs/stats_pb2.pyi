from google.protobuf import wrappers_pb2 as _wrappers_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatObject(_message.Message):
    __slots__ = ("nested", "attributes")
    class NestedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StatObject
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StatObject, _Mapping]] = ...) -> None: ...
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: StatValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[StatValue, _Mapping]] = ...) -> None: ...
    NESTED_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    nested: _containers.MessageMap[str, StatObject]
    attributes: _containers.MessageMap[str, StatValue]
    def __init__(self, nested: _Optional[_Mapping[str, StatObject]] = ..., attributes: _Optional[_Mapping[str, StatValue]] = ...) -> None: ...

class StatValue(_message.Message):
    __slots__ = ("float_numerator_val", "float_denominator_val", "int_numerator_val", "int_denominator_val", "string_val", "bool_val", "unit", "desc")
    FLOAT_NUMERATOR_VAL_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DENOMINATOR_VAL_FIELD_NUMBER: _ClassVar[int]
    INT_NUMERATOR_VAL_FIELD_NUMBER: _ClassVar[int]
    INT_DENOMINATOR_VAL_FIELD_NUMBER: _ClassVar[int]
    STRING_VAL_FIELD_NUMBER: _ClassVar[int]
    BOOL_VAL_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    float_numerator_val: _wrappers_pb2.DoubleValue
    float_denominator_val: _wrappers_pb2.DoubleValue
    int_numerator_val: _wrappers_pb2.Int64Value
    int_denominator_val: _wrappers_pb2.Int64Value
    string_val: _wrappers_pb2.StringValue
    bool_val: _wrappers_pb2.BoolValue
    unit: str
    desc: str
    def __init__(self, float_numerator_val: _Optional[_Union[_wrappers_pb2.DoubleValue, _Mapping]] = ..., float_denominator_val: _Optional[_Union[_wrappers_pb2.DoubleValue, _Mapping]] = ..., int_numerator_val: _Optional[_Union[_wrappers_pb2.Int64Value, _Mapping]] = ..., int_denominator_val: _Optional[_Union[_wrappers_pb2.Int64Value, _Mapping]] = ..., string_val: _Optional[_Union[_wrappers_pb2.StringValue, _Mapping]] = ..., bool_val: _Optional[_Union[_wrappers_pb2.BoolValue, _Mapping]] = ..., unit: _Optional[str] = ..., desc: _Optional[str] = ...) -> None: ...
