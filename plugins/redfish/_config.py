"""Connection settings: plugin-wide defaults, overridden per device by the inventory's `options`.

Per-device options (all optional):

| option | default | meaning |
|---|---|---|
| `auth` | `"session"` | `"session"` (one long-lived Redfish session per BMC) or `"basic"` |
| `concurrency` | 2 | requests in flight to this BMC at once (control, metrics and ping together) |
| `connect_timeout` / `read_timeout` | 5 / 30 s | per HTTP request, always cut to the request's deadline |
| `insecure` | false | skip TLS verification (logged as a warning) |
| `ca_bundle` | - | CA bundle file for this BMC (else the plugin-wide one, else the system store) |
| `keepalive` | true | reuse connections; false sends `Connection: close` (BMCs that mishandle keep-alive) |
| `busy_backoff` | 60 s | wait after NVIDIA `0x50A` (SMBPBI busy) before retrying |
| `retry_backoff` | 0.5 s | first back-off for 502/503/504 and connection errors (doubles, with jitter) |
| `max_retry_wait` | 30 s | cap on one back-off, including a BMC's `Retry-After` |
| `max_attempts` | 4 | attempts per HTTP call for transient failures (always bounded by the deadline) |
| `task_poll_interval` | 1 s | task-monitor polling when the BMC sends no `Retry-After` |
| `verify_after` | 2 s | delay before the asynchronous workload-profile verification |
| `logout_timeout` | 5 s | time allowed for each Redfish session DELETE at shutdown |
| `platform` | the model's | force one: `environment_metrics`, `controls`, `legacy_power`, `node_manager` |
| `basic_fallback` | false | use Basic auth when the BMC's session table is full (else the request fails) |
| `exclusive_account` | false | the account is devicectl's alone (no Context: ours only by our record) |
| `etag_policy` | the platform's | `strong` (If-Match with the ETag), `body-hash` or `none` (no If-Match) |
| `persistent_caps` | false | NVIDIA: caps survive BMC/host resets (`Oem.Nvidia.PowerLimitPersistency`) |
| `min_cap_watts` | 100 | safety floor for a cap when neither the BMC nor the device spec gives a minimum |
| `system` | none | the ComputerSystem `Id` of this device on a BMC serving several (Cray EX `Node0`) |
| `allow_power_off_on_limit` | false | accept a cap while the BMC's `LimitException` is `HardPowerOff` |
| `read_back_max_age` | 60 s | how long our read-back of a limit may stand in for a pre-write GET (0: never) |
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from plugins.base import Endpoint, HostEnvironmentError, InvalidRequestError
from plugins.base.bounds import MAX_COUNT, MAX_SECONDS, MAX_WATTS, check_number

log = logging.getLogger(__name__)

AUTH_MODES = ("session", "basic")
#: how a platform's ETags behave (see docs/redfish.md, "ETag policy")
ETAG_POLICIES = ("strong", "body-hash", "none")


@dataclass(frozen=True)
class RedfishSettings:
    """Plugin-wide defaults for every BMC (each may be overridden by a device's options)."""

    auth: str = "session"
    concurrency: int = 2
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    ca_bundle: str | None = None
    keepalive: bool = True
    busy_backoff: float = 60.0
    retry_backoff: float = 0.5
    max_retry_wait: float = 30.0
    max_attempts: int = 4
    task_poll_interval: float = 1.0
    verify_after: float = 2.0
    #: how long `close()` / `forget()` wait for each Redfish session DELETE
    logout_timeout: float = 5.0
    #: seconds an idle keep-alive connection stays open for the next request (plugin-wide: the
    #: connection pool is shared). aiohttp's 15 s default meant a new TLS handshake for nearly
    #: every request to a BMC, ~1.8 ms of CPU each; a BMC that closes sooner is simply reconnected.
    keepalive_timeout: float = 300.0
    #: the largest reply body read (a Redfish document), once any content coding is undone; a
    #: larger one is refused (`ReplyBoundError`) and its connection dropped (plugin-wide, as above)
    max_document_bytes: int = 8 << 20
    #: a session (and its connection) idle this long is refreshed with a GET of itself, so a wave
    #: after a quiet hour finds it open (plugin-wide; below `keepalive_timeout`; 0: never)
    session_refresh_after: float = 240.0
    basic_fallback: bool = False
    exclusive_account: bool = False
    etag_policy: str | None = None
    persistent_caps: bool = False
    min_cap_watts: float = 100.0
    read_back_max_age: float = 60.0

    def __post_init__(self) -> None:
        _validate(self)
        check_number(self.keepalive_timeout, "keepalive_timeout", positive=True)
        check_number(
            self.max_document_bytes, "max_document_bytes", minimum=64 << 10, maximum=1 << 30, integer=True
        )
        check_number(self.session_refresh_after, "session_refresh_after")


@dataclass(frozen=True)
class ConnectionSettings:
    """Everything needed to talk to one BMC. The password is never printed."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    auth: str = "session"
    concurrency: int = 2
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    insecure: bool = False
    ca_bundle: str | None = None
    keepalive: bool = True
    busy_backoff: float = 60.0
    retry_backoff: float = 0.5
    max_retry_wait: float = 30.0
    max_attempts: int = 4
    task_poll_interval: float = 1.0
    verify_after: float = 2.0
    logout_timeout: float = 5.0
    platform: str | None = None
    basic_fallback: bool = False
    exclusive_account: bool = False
    etag_policy: str | None = None
    persistent_caps: bool = False
    min_cap_watts: float = 100.0
    system: str = ""
    allow_power_off_on_limit: bool = False
    read_back_max_age: float = 60.0

    def __post_init__(self) -> None:
        _validate(self)

    @functools.cached_property
    def origin(self) -> str:
        """`https://host:port`, for messages (never credentials); asked for on every HTTP call."""
        return origin_of(self.url)

    def transport_key(self) -> tuple[Any, ...]:
        """What identifies one BMC connection: a change in any of these needs a new client."""
        return (
            self.url,
            self.username,
            self.password,
            self.auth,
            self.concurrency,
            self.insecure,
            self.ca_bundle,
            self.keepalive,
        )

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint, defaults: RedfishSettings) -> ConnectionSettings:
        """Merge an inventory endpoint (URL, credentials, TLS, options) over the plugin defaults."""
        url = normalize_url(endpoint.url)
        if not url.startswith("https://"):  # the inventory refuses it; a request's model may not
            raise InvalidRequestError(f"{url}: a BMC is reached over https:// only, never plaintext http://")
        options = dict(endpoint.options or {})
        known = {f.name for f in fields(cls)} - {"url", "username", "password"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidRequestError(f"{origin_of(url)}: unknown Redfish option(s): {', '.join(unknown)}")
        base = {f.name: getattr(defaults, f.name) for f in fields(defaults) if f.name in known}
        insecure = bool(options.pop("insecure", False)) or not endpoint.verify_tls
        ca_bundle = options.pop("ca_bundle", None) or endpoint.ca_bundle or defaults.ca_bundle
        creds = endpoint.credentials
        try:
            settings = cls(
                url=url,
                username=creds.username if creds else None,
                password=creds.password if creds else None,
                insecure=insecure,
                **{**base, "ca_bundle": ca_bundle, **options},
            )
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(f"{origin_of(url)}: bad Redfish option: {exc}") from exc
        return settings

    def with_auth(self, auth: str) -> ConnectionSettings:
        """The same settings with another auth mode."""
        return replace(self, auth=auth)


def config_schema() -> Mapping[str, Any]:
    """JSON-schema-like description of the per-device options."""
    # every number bounded both ways: `inventory check` refuses what `_validate` would at request time
    number = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_SECONDS}
    seconds = {"type": "number", "minimum": 0, "maximum": MAX_SECONDS}
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "auth": {"type": "string", "enum": list(AUTH_MODES), "default": "session"},
            "concurrency": {"type": "integer", "minimum": 1, "maximum": 16, "default": 2},
            "connect_timeout": {**number, "default": 5.0},
            "read_timeout": {**number, "default": 30.0},
            "insecure": {"type": "boolean", "default": False},
            "ca_bundle": {"type": "string"},
            "keepalive": {"type": "boolean", "default": True},
            "busy_backoff": {**seconds, "default": 60.0},
            "retry_backoff": {**seconds, "default": 0.5},
            "max_retry_wait": {**seconds, "default": 30.0},
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "default": 4},
            "task_poll_interval": {**number, "default": 1.0},
            "verify_after": {**seconds, "default": 2.0},
            "logout_timeout": {**number, "default": 5.0},
            "platform": {
                "type": "string",
                "enum": ["auto", "environment_metrics", "controls", "legacy_power", "node_manager"],
            },
            "basic_fallback": {"type": "boolean", "default": False},
            "exclusive_account": {"type": "boolean", "default": False},
            "etag_policy": {"type": "string", "enum": list(ETAG_POLICIES)},
            "persistent_caps": {"type": "boolean", "default": False},
            "min_cap_watts": {"type": "number", "minimum": 0, "maximum": MAX_WATTS, "default": 100.0},
            "system": {"type": "string"},
            "allow_power_off_on_limit": {"type": "boolean", "default": False},
            "read_back_max_age": {**seconds, "default": 60.0},
        },
    }


def normalize_url(url: str) -> str:
    """`https://host:port` (scheme and authority only); raises on anything else."""
    if not url:
        raise InvalidRequestError("no BMC URL: set Redfish.URL in the device model or `url` in the inventory")
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidRequestError(f"bad BMC URL {url!r}: expected https://host[:port]")
    if parts.username or parts.password:
        raise InvalidRequestError("the BMC URL must not contain credentials; use the inventory secret")
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def origin_of(url: str) -> str:
    """The URL's scheme, host and port, for log lines and messages."""
    try:
        return normalize_url(url)
    except InvalidRequestError:
        return "<invalid BMC URL>"


#: seconds that must be above 0, and seconds that may be 0 (each at most `MAX_SECONDS`)
_POSITIVE_SECONDS = ("connect_timeout", "read_timeout", "task_poll_interval", "logout_timeout")
_SECONDS = ("busy_backoff", "retry_backoff", "max_retry_wait", "verify_after", "read_back_max_age")


def _validate(obj: RedfishSettings | ConnectionSettings) -> None:
    if obj.auth not in AUTH_MODES:
        raise ValueError(f"auth must be one of {AUTH_MODES}, not {obj.auth!r}")
    # every number finite and in range: a NaN timeout passes `<= 0` and stalls the event loop
    check_number(obj.concurrency, "concurrency", minimum=1, maximum=MAX_COUNT, integer=True)
    check_number(obj.max_attempts, "max_attempts", minimum=1, maximum=MAX_COUNT, integer=True)
    for name in _POSITIVE_SECONDS:
        check_number(getattr(obj, name), name, positive=True)
    for name in _SECONDS:
        check_number(getattr(obj, name), name)
    if obj.etag_policy is not None and obj.etag_policy not in ETAG_POLICIES:
        raise ValueError(f"etag_policy must be one of {ETAG_POLICIES}, not {obj.etag_policy!r}")
    check_number(obj.min_cap_watts, "min_cap_watts", maximum=MAX_WATTS)
    bundle = obj.ca_bundle
    if bundle is not None and not isinstance(bundle, str):
        raise ValueError("ca_bundle must be a file path")


def check_ca_bundle(path: str) -> None:
    """Raise a clear configuration error when a CA bundle file cannot be read."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise HostEnvironmentError(f"CA bundle {path!r} cannot be read: {exc.strerror or exc}") from exc
