"""One settings object: defaults ← config file (TOML) ← environment (DEVICECTL_*) ← flags."""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from plugins.base.bounds import MAX_COUNT, check_number

ENV_PREFIX = "DEVICECTL_"


@dataclass(frozen=True)
class Settings:
    """Controller settings. Every field can come from the config file, DEVICECTL_<NAME> or a flag."""

    #: gRPC listen address for DeviceController, the admin API, health and reflection
    listen: str = "127.0.0.1:50051"
    #: SQLAlchemy URL: SQLite file (default) or postgresql+psycopg://...
    database_url: str = "sqlite:///var/devicectl.db"
    #: where TopologyCallback.DeviceResponse is served; empty keeps responses in the outbox
    callback: str = "127.0.0.1:50052"
    #: device inventory file (TOML)
    inventory: str = ""
    #: directory with one file per secret name (like a mounted Kubernetes secret)
    secrets_dir: str = ""
    #: CA bundle for every device that does not name its own
    ca_bundle: str = ""
    #: deadline of a request whose timeout_seconds is 0
    device_call_timeout: float = 60.0
    #: most requests running at once across all devices
    max_concurrency: int = 1024
    #: most requests waiting per device; beyond it a request is answered with an error
    queue_limit: int = 1000
    #: plugin for devices known only from device_model_json that name none
    default_plugin: str = "redfish"
    #: identity of this controller process in the journal (work claims, leases)
    instance_id: str = dataclasses.field(default_factory=socket.gethostname)
    #: seconds after which another controller may take over this one's unfinished work
    lease_ttl: float = 30.0

    # --- several processes on one PostgreSQL (docs/architecture.md, "Several controllers") ---
    #: what this process does: `all` (accept and execute), `frontend` (journal and ack only),
    #: `executor` (claim and run the journaled requests of the shards it leases; no DeviceController port)
    role: str = "all"
    #: `serve --workers N`: a front end plus N executor processes on this machine (PostgreSQL only)
    workers: int = 0
    #: niceness added to the executors `--workers` starts (0: the front end's own), so a busy wave
    #: yields the CPU to the front end's acks on a shared host; the kernel caps niceness at 19
    executor_niceness: int = 5
    #: devices map to this many shards (a stable hash of the BMC endpoint); every controller must agree
    shard_count: int = 256
    #: how often an executor looks for requests other controllers journaled in its shards, seconds
    claim_interval: float = 0.1
    #: responses being delivered at once (one per device)
    delivery_concurrency: int = 64
    #: cap of the exponential backoff between delivery attempts, seconds
    delivery_max_backoff: float = 30.0
    #: per-attempt timeout of a delivery call, seconds
    delivery_timeout: float = 10.0
    #: upgrade the database schema at start instead of refusing to run on an old one
    auto_upgrade: bool = False
    #: seconds to let in-flight work finish at shutdown
    shutdown_grace: float = 10.0
    log_level: str = "INFO"

    # --- keeping every ack without a human (docs/architecture.md, "Guarantees") ---
    #: cap of the backoff while a completion (or a job's database read) is retried in its lane
    completion_retry_max: float = 5.0
    #: how often this instance's journal is swept for unfinished requests in no lane, seconds
    sweep_interval: float = 10.0
    #: how often the journal's health is checked (health NOT_SERVING while it cannot commit)
    health_interval: float = 1.0
    #: health NOT_SERVING once a journal write has waited this long for its commit (a lock held
    #: elsewhere makes writes hang rather than fail), seconds; 0 turns the check off
    journal_stall_seconds: float = 5.0
    #: cap of the interval between probes of a topology callback that is down, seconds (one
    #: probe at a time; its first success releases the whole backlog)
    delivery_probe_max_interval: float = 5.0

    # --- hostile input (docs/security.md, "Input limits") ---
    #: largest accepted device_model_json / device_state_json / entity model, bytes
    max_json_bytes: int = 256 * 1024
    #: deepest accepted nesting of arrays and objects in those JSON fields
    max_json_depth: int = 32

    # --- security (docs/security.md) ---
    #: PEM certificate and key the gRPC server presents; both empty serves plaintext (loopback only)
    tls_cert: str = ""
    tls_key: str = ""
    #: CA bundle client certificates must chain to; set = mutual TLS, a client certificate required
    tls_client_ca: str = ""
    #: certificate identity (CN or SAN) -> role: "identity=role[+role],..." or a TOML table;
    #: roles are topology, operator, admin; "*" matches any verified certificate
    roles: str = ""
    #: allow plaintext gRPC (server and callback) on non-loopback addresses; logged as a warning
    insecure: bool = False
    #: serve gRPC server reflection (needs the operator role under mutual TLS)
    reflection: bool = False
    #: TLS on the callback channel (implied by any callback_* file): CA that verifies the topology
    #: service (empty: the system's), client certificate and key, and a server-name override
    callback_tls: bool = False
    callback_ca_cert: str = ""
    callback_cert: str = ""
    callback_key: str = ""
    callback_server_name: str = ""
    #: accept secret files readable by group or others (logged as a warning) instead of refusing them
    secrets_allow_readable: bool = False

    # --- agent transport (docs/architecture.md, "Two transports") ---
    #: topology server to dial out to (AgentService.Connect); empty: no agent stream. TLS and the
    #: client certificate are the callback_* settings; the agent id is that certificate's CN
    agent_server: str = ""
    #: agent id on a plaintext loopback stream (no client certificate to take it from)
    agent_id: str = ""
    #: devices served over the agent stream (comma-separated fnmatch patterns); the rest keep the
    #: unary callback. A device belongs to one transport, so its responses keep one order
    agent_devices: str = "*"
    #: seconds between the agent's pings; a stream silent for three intervals is dropped
    agent_ping_interval: float = 10.0
    #: requests accepted on the stream but not yet journaled; more are answered queue_full
    agent_max_in_flight: int = 256
    #: cap of the agent's reconnect back-off (jittered, doubling from 0.2 s), seconds
    agent_reconnect_max: float = 5.0

    # --- operations (docs/operations.md) ---
    #: HOST:PORT serving /metrics, /healthz and /readyz over HTTP; empty: off
    metrics_listen: str = ""
    #: no longer read: a delivery backlog does not make a pod unready (a topology outage would empty
    #: the Service); alert on devicectl_outbox_oldest_age_seconds. Accepted so old configs load.
    ready_max_backlog_age: float = 300.0
    #: per-device requested/enforced power gauges (one series per device and component)
    metrics_per_device: bool = False
    #: most devices with per-device gauges; the least recently changed are dropped
    metrics_max_devices: int = 1000
    #: log line format: text or json
    log_format: str = "text"
    #: retention in days (0 keeps forever): completed+delivered journal rows, delivered outbox
    #: rows, dead letters, audit rows; pruned every retention_interval seconds (0: never)
    retention_journal_days: float = 30.0
    retention_outbox_days: float = 30.0
    retention_dead_letter_days: float = 90.0
    retention_audit_days: float = 90.0
    retention_interval: float = 3600.0
    retention_batch: int = 1000
    #: seconds between drift checks of one device (desired vs enforced limits; 0: no checks)
    drift_interval: float = 0.0
    #: devices (globs, comma-separated) whose drift is re-applied; every other device: reported
    drift_reapply: str = ""
    #: re-applications per device per hour, beyond which drift is only reported
    drift_max_reapply_per_hour: int = 3
    #: shadow mode (DPS 0.11): every request is validated, planned and recorded with the writes it
    #: would make, and answered; no write is sent to any device (reads stay live)
    shadow: bool = False
    #: DPS's "retain device limits after topology deactivation": a topology deactivation keeps the
    #: limits in force instead of restoring them (an inventory entry's key of the same name wins)
    retain_limits_on_topology_deactivate: bool = False
    #: devices logged in to and discovered at once by the warm-up at start (0: no warm-up)
    warmup_concurrency: int = 32
    #: drift checks running at once in one sweep (each BMC's own plugin limit still applies)
    drift_concurrency: int = 64

    def __post_init__(self) -> None:
        for name in _NUMBERS:  # however the settings were made: every number finite and in range
            check_setting(name, getattr(self, name))

    def display(self) -> dict[str, Any]:
        """The settings as a dict, with passwords in URLs masked."""
        out = dataclasses.asdict(self)
        out["database_url"] = mask_url(self.database_url)
        return out


def mask_url(url: str) -> str:
    """`scheme://user:***@host/db` for URLs carrying a password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def load_settings(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build settings from the layers, each overriding the one before.

    Raises:
        ValueError: unknown keys or values of the wrong type, naming the source.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_file or env.get(f"{ENV_PREFIX}CONFIG")
    if path:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
        data = data.get("devicectl", data)
        values.update(_coerce_all(data, f"config file {path}"))
    names = {f.name for f in fields(Settings)}
    for name in names:
        key = f"{ENV_PREFIX}{name.upper()}"
        if key in env:
            values[name] = _coerce(name, env[key], f"environment {key}")
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, f"flag --{name.replace('_', '-')}")
    return Settings(**values)


_TYPES = {f.name: f.type for f in fields(Settings)}
_NUMBERS = tuple(name for name, kind in _TYPES.items() if kind in ("int", "float"))


def _coerce_all(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    unknown = sorted(set(data) - set(_TYPES))
    if unknown:
        raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}")
    return {k: _coerce(k, v, source) for k, v in data.items()}


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _TYPES.get(name)
    if kind is None:
        raise ValueError(f"{source}: unknown setting {name!r}")
    if name == "roles" and isinstance(value, Mapping):  # TOML table: identity = role or [roles]
        value = ",".join(
            f"{k}={'+'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
        )
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(value)
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if kind == "int":
            number: Any = int(value) if isinstance(value, str) else value
        elif kind == "float":
            number = float(value) if isinstance(value, str) else value
        else:
            return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: {name} must be a {kind}, got {value!r}") from None
    try:
        return check_setting(name, number)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def check_setting(name: str, value: Any) -> Any:
    """A numeric setting's value when it is finite and in range (`plugins.base.bounds`): at least 0
    and at most a year of seconds (floats) or `MAX_COUNT` (integers). A NaN interval would pass
    every `<= 0` check and stall the event loop's timers; an infinite count overflows `int()`."""
    if _TYPES[name] == "int":
        return check_number(value, name, maximum=MAX_COUNT, integer=True)
    return float(check_number(value, name))
