"""Redfish plugin: power control of BMCs over Redfish.

`RedfishPlugin` serves every Redfish device of the process over one shared `aiohttp` session
(`redfish.aio.AsyncRedfishClient` per BMC, through its adapter `_wire.dmtf`): one long-lived Redfish
session and one concurrency limit per BMC, TLS verified by default, retries only for transient
failures within the request's deadline.
Platforms: NVIDIA EnvironmentMetrics (GB200/GB300 NVL, B200EM, B300EM), DMTF `Control` resources, and
the legacy `Chassis/{id}/Power`; Node Manager platforms (DGX H100/B200/B300) answer "unsupported".
The BMC simulator lives in the top-level `bmcsim` package, which this plugin never imports.
See docs/redfish.md.
"""

from plugins.redfish._config import ConnectionSettings, RedfishSettings
from plugins.redfish._discovery.layout import Component, Discovery
from plugins.redfish._plugin import RedfishPlugin
from plugins.redfish._wire.errors import (
    AccessError,
    BadRequestError,
    BmcBusyError,
    ConnectionFailedError,
    DeadlineExceededError,
    GatewayError,
    PlatformUnsupportedError,
    PreconditionFailedError,
    ProtocolError,
    RedfishError,
    RedfishHTTPError,
    RequestTimeoutError,
    ResourceNotFoundError,
    ServerSideError,
    ServiceUnavailableError,
    TaskFailedError,
    TlsError,
    WriteMaybeAppliedError,
    raise_for_response,
)

__all__ = [
    "AccessError",
    "BadRequestError",
    "BmcBusyError",
    "Component",
    "ConnectionFailedError",
    "ConnectionSettings",
    "DeadlineExceededError",
    "Discovery",
    "GatewayError",
    "PlatformUnsupportedError",
    "PreconditionFailedError",
    "ProtocolError",
    "RedfishError",
    "RedfishHTTPError",
    "RedfishPlugin",
    "RedfishSettings",
    "RequestTimeoutError",
    "ResourceNotFoundError",
    "ServerSideError",
    "ServiceUnavailableError",
    "TaskFailedError",
    "TlsError",
    "WriteMaybeAppliedError",
    "raise_for_response",
]
