"""The device-plugin contract, shaped after Nomad's `DevicePlugin`.

A plugin is long-lived and shared by every device it serves, but keeps no device state of its
own: the controller passes the device's state in (`DeviceContext.state`) and persists what the
plugin returns (`Outcome.state`). Connection pools and login sessions are caches, not state.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from plugins.base import _types as t
from plugins.base._errors import DeviceControllerError, UnsupportedError
from plugins.base._fields import plain_init
from plugins.base._streams import ContainerReservation, FingerprintResponse, StatsResponse
from plugins.base.health import HealthQuery, HealthResult
from plugins.base.kinds import Kind, kind_of
from plugins.base.receipts import DeviceWrite, WriteLog, recording

R = TypeVar("R")


@dataclass(frozen=True)
class Credentials:
    """A username/password pair resolved from a named secret. Never printed."""

    username: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password='***')"


@dataclass(frozen=True)
class Endpoint:
    """How to reach a device: from the inventory, or from the request's device model JSON."""

    url: str = ""
    credentials: Credentials | None = None
    #: verify TLS certificates (on unless the inventory says `insecure = true`)
    verify_tls: bool = True
    #: CA bundle file to verify with; None means the system store
    ca_bundle: str | None = None
    #: plugin-specific options from the inventory (validated against the plugin's config schema)
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DeviceTarget:
    """A device a plugin serves: its id, model JSON and endpoint."""

    device_id: str
    model: Mapping[str, Any] = field(default_factory=dict)
    endpoint: Endpoint = field(default_factory=Endpoint)


@dataclass(frozen=True, kw_only=True)
class DeviceContext(DeviceTarget):
    """Everything one operation needs. `state` is the device's plugin state JSON (a dict)."""

    request_id: str = ""
    trace_id: str = ""
    #: absolute deadline on the `time.monotonic()` clock
    deadline: float = field(default_factory=lambda: time.monotonic() + 30.0)
    state: Mapping[str, Any] = field(default_factory=dict)
    #: plan only: the write choke points record what they would send and send nothing
    dry_run: bool = False

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True)
class PendingVerification:
    """A check the controller should run later through `DevicePlugin.verify`.

    Plugins keep no timers: they describe the check and the controller schedules, runs and
    records it (visible through the admin API as a verification record).
    """

    verification_id: str
    check_after_seconds: float
    payload: Mapping[str, Any] = field(default_factory=dict)
    #: how many times the controller may run the check before recording it as failed
    max_checks: int = 5


@dataclass(frozen=True)
class VerificationResult:
    """Outcome of one verification check. `done=False` asks the controller to check again."""

    done: bool
    status: str  # "verified", "mismatch", "failed" or "pending"
    detail: str = ""


@plain_init  # made for every request, and again with its writes (`run_operation`)
@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What an operation returns: its result and, optionally, new device state.

    Args:
        result: the request kind's result type.
        state: the new plugin state JSON object; None keeps the stored state unchanged.
        reached_at: when the device was last reached (becomes `device_ping_time`).
        reach_error: why the device could not be reached (becomes `device_ping_error`).
        verification: a follow-up check for the controller to schedule.
        writes: the device writes made (planned, in a dry run); `run_operation` fills them in
            from the operation's write log, so plugins only report writes at their choke point.
    """

    result: R
    state: Mapping[str, Any] | None = None
    reached_at: datetime | None = None
    reach_error: str = ""
    verification: PendingVerification | None = None
    writes: tuple[DeviceWrite, ...] = ()


@dataclass(frozen=True)
class PluginInfo:
    name: str
    version: str
    vendor: str = ""
    description: str = ""


class DevicePlugin(ABC):
    """Base class of device plugins.

    Nomad's three methods (`fingerprint`, `reserve`, `stats`) plus one typed coroutine per
    request kind. Every operation receives a `DeviceContext` and returns an `Outcome`; it raises
    a `DeviceControllerError` subclass on failure. The defaults raise `UnsupportedError`, so a
    plugin implements only what its devices can do.
    """

    info: ClassVar[PluginInfo]

    #: version of the state JSON this plugin writes; `load_state` migrates older versions
    state_version: ClassVar[int] = 1

    #: every device write goes through `write_log()` (receipts) and honours `DeviceContext.dry_run`;
    #: the controller refuses dry runs for plugins that do not say so (they might write)
    supports_dry_run: ClassVar[bool] = False

    #: its writes are recorded in the caller's write log as they are made (in process); False: an
    #: out-of-process plugin, whose receipts come back only with its reply (or its error)
    writes_in_process: ClassVar[bool] = True

    #: a `std_metrics` read at the controller's start leaves the device faster to reach (a session,
    #: a connection, a discovery cache): the warm-up reads it once in the background
    warm_up: ClassVar[bool] = False

    def config_schema(self) -> Mapping[str, Any]:
        """JSON-schema-like description of the `options` this plugin accepts per device."""
        return {"type": "object", "properties": {}}

    def known_models(self) -> Collection[str] | None:
        """The model names this plugin knows (any case), so that `inventory check` and `serve` flag
        a typo in an inventory's bare `model = "..."`; None (the default): any name will do."""
        return None

    def load_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check (and migrate from an older `state_version`) a device's state JSON before use.

        The state comes from the database or from a request's `device_state_json`, so it is
        untrusted input. Raise `InvalidRequestError` with a one-line message naming the bad key
        when it does not fit this plugin's schema; never let a malformed value reach device code.
        """
        return dict(state)

    def check_model(self, model: Mapping[str, Any]) -> None:
        """Check a device model JSON (from the inventory or a request) against this plugin's schema.

        Raise `InvalidRequestError` with a one-line message naming the bad key.
        """

    def set_client_id(self, client_id: str) -> None:
        """Who this plugin acts for: the controller's instance id, called before `start`.

        Stable across the controller's restarts and distinct between controllers that run at once;
        a plugin that leaves marks on devices (a Redfish session's `Context`) uses it to find what
        an earlier, killed process of the same controller left behind. Default: ignored.
        """

    async def start(self) -> None:
        """Open shared resources (HTTP sessions, libraries). Called once per process."""

    async def close(self) -> None:
        """Release everything opened since `start` (log out of BMCs, shut libraries down)."""

    async def forget(self, device_id: str) -> None:
        """The device was dropped from the inventory: release anything held for it."""

    # ---- Nomad's trio ---------------------------------------------------------------------

    def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncIterator[FingerprintResponse]:
        """Stream device groups: once at once, then again whenever something changes."""
        raise UnsupportedError(f"{self.info.name}: fingerprint is not supported")

    def stats(self, targets: Sequence[DeviceTarget], interval: float) -> AsyncIterator[StatsResponse]:
        """Stream per-device statistics every `interval` seconds."""
        raise UnsupportedError(f"{self.info.name}: stats are not supported")

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        """Environment, mounts and device nodes a task needs to use these devices."""
        raise UnsupportedError(f"{self.info.name}: reserve is not supported")

    # ---- power operations (the coroutine of each built-in row of `plugins.base.kinds.KINDS`) --

    async def activate_allocation(self, ctx: DeviceContext, req: t.Allocation) -> Outcome[t.AllocationResult]:
        raise UnsupportedError(f"{self.info.name}: resource group activation is not supported")

    async def update_allocation(self, ctx: DeviceContext, req: t.Allocation) -> Outcome[t.AllocationResult]:
        raise UnsupportedError(f"{self.info.name}: resource group update is not supported")

    async def deactivate_allocation(
        self, ctx: DeviceContext, req: t.Allocation
    ) -> Outcome[t.AllocationResult]:
        raise UnsupportedError(f"{self.info.name}: resource group deactivation is not supported")

    async def set_policy(self, ctx: DeviceContext, req: t.PolicyChange) -> Outcome[t.AllocationResult]:
        """Topology activation: apply the node policy."""
        raise UnsupportedError(f"{self.info.name}: topology activation is not supported")

    async def unset_policy(self, ctx: DeviceContext, req: t.PolicyChange) -> Outcome[t.AllocationResult]:
        """Topology deactivation: apply the spec's idle policy, or restore the previous values."""
        raise UnsupportedError(f"{self.info.name}: topology deactivation is not supported")

    async def update_gpu_policies(
        self, ctx: DeviceContext, req: t.GpuPoliciesChange
    ) -> Outcome[t.GpuPoliciesResult]:
        raise UnsupportedError(f"{self.info.name}: GPU policies are not supported")

    async def enable_profiles(self, ctx: DeviceContext, req: t.ProfileChange) -> Outcome[t.ProfileResult]:
        raise UnsupportedError(f"{self.info.name}: workload power profiles are not supported")

    async def disable_profiles(self, ctx: DeviceContext, req: t.ProfileChange) -> Outcome[t.ProfileResult]:
        raise UnsupportedError(f"{self.info.name}: workload power profiles are not supported")

    async def update_profiles(self, ctx: DeviceContext, req: t.ProfileChange) -> Outcome[t.ProfileResult]:
        raise UnsupportedError(f"{self.info.name}: workload power profiles are not supported")

    async def ping(self, ctx: DeviceContext, req: t.Ping) -> Outcome[t.PingResult]:
        raise UnsupportedError(f"{self.info.name}: ping is not supported")

    async def gpu_metrics(self, ctx: DeviceContext, req: t.GpuMetricsQuery) -> Outcome[t.GpuMetricsResult]:
        raise UnsupportedError(f"{self.info.name}: GPU metrics are not supported")

    async def raw_metrics(self, ctx: DeviceContext, req: t.Empty) -> Outcome[t.RawMetricsResult]:
        raise UnsupportedError(f"{self.info.name}: raw metrics are not supported")

    async def std_metrics(self, ctx: DeviceContext, req: t.Empty) -> Outcome[t.StdMetricsResult]:
        raise UnsupportedError(f"{self.info.name}: standard metrics are not supported")

    async def modify_entity(
        self, ctx: DeviceContext, req: t.EntityModification
    ) -> Outcome[t.EntityModificationResult]:
        """Two-phase entity modification. The default accepts the change with no phase 1."""
        return Outcome(t.EntityModificationResult(t.EntityVerdict.ACCEPTED, "no device-side change needed"))

    async def bmc_health(self, ctx: DeviceContext, req: HealthQuery) -> Outcome[HealthResult]:
        """Is the device ready for power management: read-only checks, and a write cycle of every
        writable cap (set, read back, restore exactly) unless `req.skip_writes`."""
        raise UnsupportedError(f"{self.info.name}: health verification is not supported")

    async def operate(self, kind: Kind, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        """Serve one request of `kind`: the coroutine its row names (`Kind.method`); a plugin
        without it does not support the kind. The plugin proxy overrides this to send the kind
        over the plugin protocol's one operation RPC."""
        method = getattr(self, kind.method, None)
        if method is None:
            raise UnsupportedError(f"{self.info.name}: {kind.name} is not supported")
        outcome: Outcome[Any] = await method(ctx, request)
        return outcome

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        """Run a follow-up check that an earlier operation asked for."""
        raise UnsupportedError(f"{self.info.name}: verification is not supported")


async def run_operation(
    plugin: DevicePlugin,
    kind: str,
    ctx: DeviceContext,
    request: Any,
    log: WriteLog | None = None,
) -> Outcome[Any]:
    """Run the request kind named `kind` (a `RequestKind`, or a kind registered in `KINDS`) on
    `plugin` (`DevicePlugin.operate`), recording its device writes.

    Pass `log` to see the writes of an operation that raises (they are on the outcome otherwise).
    """
    row = kind_of(kind)
    log = log if log is not None else WriteLog(dry_run=ctx.dry_run)
    try:
        with recording(log):
            outcome: Outcome[Any] = await plugin.operate(row, ctx, request)
    except DeviceControllerError as exc:  # an out-of-process plugin's receipts came back with it
        if exc.receipts:
            log.record(exc.receipts)
        raise
    # an out-of-process plugin's writes come back on its outcome; in-process ones are in the log
    writes = (*outcome.writes, *log.entries())
    return dataclasses.replace(outcome, writes=writes) if writes != outcome.writes else outcome
