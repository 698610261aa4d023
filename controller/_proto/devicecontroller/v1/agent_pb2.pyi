from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as _devicecontroller_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentMessage(_message.Message):
    __slots__ = ("handshake", "ping", "pong", "response", "request_ack", "error", "alert")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ACK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ALERT_FIELD_NUMBER: _ClassVar[int]
    handshake: Handshake
    ping: Ping
    pong: Pong
    response: DeviceResponse
    request_ack: RequestAck
    error: AgentError
    alert: Alert
    def __init__(self, handshake: _Optional[_Union[Handshake, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., response: _Optional[_Union[DeviceResponse, _Mapping]] = ..., request_ack: _Optional[_Union[RequestAck, _Mapping]] = ..., error: _Optional[_Union[AgentError, _Mapping]] = ..., alert: _Optional[_Union[Alert, _Mapping]] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("accepted", "ping", "pong", "request", "response_ack", "error", "config")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ACK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    accepted: HandshakeAccepted
    ping: Ping
    pong: Pong
    request: DeviceRequest
    response_ack: ResponseAck
    error: AgentError
    config: RemoteConfig
    def __init__(self, accepted: _Optional[_Union[HandshakeAccepted, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., request: _Optional[_Union[DeviceRequest, _Mapping]] = ..., response_ack: _Optional[_Union[ResponseAck, _Mapping]] = ..., error: _Optional[_Union[AgentError, _Mapping]] = ..., config: _Optional[_Union[RemoteConfig, _Mapping]] = ...) -> None: ...

class Handshake(_message.Message):
    __slots__ = ("agent_id", "version", "protocol_version", "capabilities", "devices", "max_in_flight")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    version: str
    protocol_version: int
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    devices: _containers.RepeatedScalarFieldContainer[str]
    max_in_flight: int
    def __init__(self, agent_id: _Optional[str] = ..., version: _Optional[str] = ..., protocol_version: _Optional[int] = ..., capabilities: _Optional[_Iterable[str]] = ..., devices: _Optional[_Iterable[str]] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class HandshakeAccepted(_message.Message):
    __slots__ = ("server_id", "config")
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    server_id: str
    config: RemoteConfig
    def __init__(self, server_id: _Optional[str] = ..., config: _Optional[_Union[RemoteConfig, _Mapping]] = ...) -> None: ...

class RemoteConfig(_message.Message):
    __slots__ = ("ping_interval_seconds", "max_in_flight")
    PING_INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    ping_interval_seconds: int
    max_in_flight: int
    def __init__(self, ping_interval_seconds: _Optional[int] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class Pong(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class DeviceRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: _devicecontroller_pb2.DeviceControllerRequest
    def __init__(self, request: _Optional[_Union[_devicecontroller_pb2.DeviceControllerRequest, _Mapping]] = ...) -> None: ...

class RequestAck(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class DeviceResponse(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: _devicecontroller_pb2.DeviceControllerResponse
    def __init__(self, response: _Optional[_Union[_devicecontroller_pb2.DeviceControllerResponse, _Mapping]] = ...) -> None: ...

class ResponseAck(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AgentError(_message.Message):
    __slots__ = ("code", "message", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    request_id: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class Alert(_message.Message):
    __slots__ = ("severity", "device", "message")
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    severity: str
    device: str
    message: str
    def __init__(self, severity: _Optional[str] = ..., device: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("agent_id", "connected", "devices", "last_seen_unix", "queued", "version", "responses", "duplicates")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_UNIX_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    connected: bool
    devices: _containers.RepeatedScalarFieldContainer[str]
    last_seen_unix: float
    queued: int
    version: str
    responses: int
    duplicates: int
    def __init__(self, agent_id: _Optional[str] = ..., connected: _Optional[bool] = ..., devices: _Optional[_Iterable[str]] = ..., last_seen_unix: _Optional[float] = ..., queued: _Optional[int] = ..., version: _Optional[str] = ..., responses: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentInfo]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentInfo, _Mapping]]] = ...) -> None: ...
