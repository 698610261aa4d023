"""`RemotePlugin`: a `DevicePlugin` whose work happens in another process, plus its supervision.

To the rest of the controller it is just another plugin. Underneath it starts (or dials) the
plugin, health-checks it every `health_interval`, and when the process dies or stops answering
it restarts it with capped exponential backoff. A plugin counts as hung only when its health
checks fail *and* none of its calls finished meanwhile: a plugin busy with a large fan-out may
answer health checks late, and killing it would fail the work it is doing.

A request in flight when the plugin dies is answered with a retryable `TransientError`, not re-run:
the request that was running may be what killed the plugin, and re-running it could crash the
plugin again and again; the topology service, which owns retries, decides. Requests that arrive
while the plugin is restarting wait for it (within their own deadline) and then run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration

from controller.plugin_host.launch import Connection, ExternalPlugin, connect
from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
from plugins._proto.nomad.plugins.device import device_pb2 as dpb
from plugins.base import (
    ContainerReservation,
    DeviceContext,
    DeviceControllerError,
    DevicePlugin,
    DeviceTarget,
    DeviceTimeoutError,
    FingerprintResponse,
    Outcome,
    PendingVerification,
    PluginInfo,
    StatsResponse,
    TransientError,
    UnsupportedError,
    VerificationResult,
    relinquished,
    uncancelled,
)
from plugins.base import nomad as n
from plugins.base import wire as w
from plugins.base.codec import encode
from plugins.base.kinds import KINDS, Kind

log = logging.getLogger(__name__)

T = TypeVar("T")

#: a plugin that stayed up this long restarts at the shortest backoff again
_STABLE_AFTER = 30.0


class RemotePlugin(DevicePlugin):
    info = PluginInfo(name="external", version="")
    writes_in_process = False  # its receipts come back with its reply or its error

    def __init__(
        self,
        spec: ExternalPlugin,
        *,
        min_backoff: float = 0.2,
        max_backoff: float = 30.0,
        health_interval: float = 2.0,
        health_timeout: float = 5.0,
        health_failures: int = 3,
    ) -> None:
        self.spec = spec
        self._min, self._max = min_backoff, max_backoff
        self._health_interval, self._health_failures = health_interval, health_failures
        self._health_timeout = health_timeout
        #: monotonic time of the last reply to any call: progress proves the plugin is not hung
        self._last_reply = 0.0
        self._conn: Connection | None = None
        self._ready = asyncio.Event()
        #: a connection a call found dead, until the supervisor replaces it (or it answers a
        #: health check): later calls wait for the restart instead of meeting the dead plugin
        self._gone: Connection | None = None
        self._closing = False
        self._supervisor: asyncio.Task[None] | None = None
        self.last_error = ""
        #: restarts so far (for tests and `devicectl plugins`)
        self.restarts = 0
        vars(self)["info"] = PluginInfo(name=spec.label, version="", description="out of process")

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self, *, supervise: bool = True) -> None:
        """Start and negotiate once (its error is the caller's), then keep it running."""
        await self._connect()
        if supervise:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"plugin {self.spec.name}")

    async def _connect(self) -> None:
        conn = await connect(self.spec)
        if not self.spec.name:  # started by `plugin launch`: named by its PluginInfo
            self.spec = dataclasses.replace(self.spec, name=conn.name)
        self._conn = conn
        vars(self)["info"] = PluginInfo(
            name=self.spec.name,
            version=conn.info.plugin_version,
            description=f"out of process: {conn.info.name} (device API {conn.api_version})",
        )
        # shadow mode and dry runs call it with a request that may write only when it vouches that
        # a dry run sends nothing (its Capabilities; asked again after each restart)
        vars(self)["supports_dry_run"] = conn.dry_run
        self._ready.set()
        log.info("plugin %s up: %s %s at %s", self.spec.name, conn.info.name, self.info.version, conn.target)

    @property
    def connection(self) -> Connection | None:
        return self._conn if self._ready.is_set() else None

    async def _supervise(self) -> None:
        delay = self._min
        while not self._closing:
            assert self._conn is not None
            up_since = time.monotonic()
            reason = await self._watch(self._conn)
            if self._closing:
                return
            self._ready.clear()
            self.last_error = reason
            log.warning("plugin %s: %s; restarting", self.spec.name, reason)
            await self._conn.close(graceful=False)
            if time.monotonic() - up_since > _STABLE_AFTER:
                delay = self._min
            while not self._closing:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max)
                try:
                    await self._connect()
                except DeviceControllerError as exc:
                    self.last_error = str(exc)
                    log.warning("plugin %s: restart failed: %s (retry in %.1f s)", self.spec.name, exc, delay)
                    continue
                self.restarts += 1
                break

    async def _watch(self, conn: Connection) -> str:
        """Return why the plugin must be restarted: its process ended, or it stopped answering."""
        failures, streak_began = 0, 0.0
        exited = asyncio.ensure_future(conn.process.wait()) if conn.process is not None else None
        try:
            while True:
                if exited is not None:
                    await asyncio.wait({exited}, timeout=self._health_interval)
                    if exited.done():
                        return f"process exited with status {exited.result()}"
                else:
                    await asyncio.sleep(self._health_interval)
                checked = time.monotonic()
                if failures == 0:
                    streak_began = checked
                healthy = await conn.healthy(self._health_timeout)
                if healthy and self._gone is conn:
                    if conn.process is None:
                        # a dialed plugin's channel redials its address by itself: what answers
                        # there now may be a new process that never got our config
                        return "the connection was lost; dialing the plugin and configuring it again"
                    self._gone = None  # a false alarm: calls go to it again
                # a call finished since this run of failed checks began: busy, not hung
                failures = 0 if healthy or self._last_reply >= streak_began else failures + 1
                if failures >= self._health_failures:
                    return f"no answer to {failures} health checks in a row"
        finally:
            if exited is not None:
                exited.cancel()

    async def close(self) -> None:
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._conn is not None:
            await self._conn.close()
        self._ready.clear()

    async def _available(self, wait: float) -> Connection:
        """The live connection; while the plugin restarts, wait for it up to `wait` seconds."""
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), max(wait, 0.0))
        if not self._ready.is_set() or self._conn is None:
            raise TransientError(
                f"plugin {self.spec.name} is not running "
                f"(restarting after: {self.last_error or 'not started'}); retry later"
            )
        return self._conn

    def _error(self, err: grpc.aio.AioRpcError, what: str) -> DeviceControllerError:
        code = err.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) and not self._trailer_error(err):
            return TransientError(
                f"plugin {self.spec.name} went away during {what} (it crashed or is restarting: "
                f"{code.name}: {err.details()}); the request did not complete and may be retried"
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return _Unanswered(f"plugin {self.spec.name} did not answer {what} before the deadline")
        if code == grpc.StatusCode.UNIMPLEMENTED and not self._trailer_error(err):
            return UnsupportedError(f"plugin {self.spec.name} does not offer {what}")
        return w.error_from_status(err, self.spec.name)

    def _went_away(self, what: str) -> TransientError | None:
        """The error for a call that gRPC cancelled because its channel was closed; None when the
        calling task itself is being cancelled (a deadline, a lapsed lease, shutdown).

        NOTE: when the plugin dies or hangs, the supervisor closes its channel, and gRPC ends the
        calls still in flight on it as cancelled locally: they raise `CancelledError` in tasks that
        nobody cancelled. Whether a call saw the dead socket's UNAVAILABLE first or the close was
        a race; a CancelledError escaping into the device's lane ended the lane, so the request
        was neither answered nor failed, and ran again after the next sweep."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return None
        return TransientError(
            f"plugin {self.spec.name} went away during {what} (it crashed or is restarting: its "
            "connection was closed); the request did not complete and may be retried"
        )

    async def _call(self, what: str, call: Awaitable[T], *, unsent: bool = False) -> T:
        """Await one unary call; its failures as the controller's errors (see `_error`), or
        when `unsent`, `_Unsent` for a call gRPC failed without sending it and `_WentAway` for
        one whose connection was lost under it (the caller then holds later calls back)."""
        try:
            return await call
        except grpc.aio.AioRpcError as err:
            if unsent and _never_sent(err):
                raise _Unsent from None
            error = self._error(err, what)
            if unsent and _connection_lost(err):
                raise _WentAway(error) from None
            raise error from None
        except asyncio.CancelledError:
            went = self._went_away(what)
            if went is None:
                raise
            if unsent:
                raise _WentAway(went) from None
            raise went from None

    @staticmethod
    def _trailer_error(err: grpc.aio.AioRpcError) -> bool:
        return any(k == w.ERROR_CODE_KEY for k, _ in (err.trailing_metadata() or ()))

    # ---- power operations ---------------------------------------------------------------------

    async def operate(self, kind: Kind, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        """Send one request of `kind` to the plugin process through `PowerOperations.Operate`.

        A cancel that hands the device on (`RELINQUISHED`: the caller's shard lease lapsed) is told
        to the plugin process too (`Relinquish`): a gRPC cancel carries no reason, and the process
        would finish the work the call shields (a write cycle's restore) beside the next holder.
        A writing call given up otherwise (its deadline, a plain cancel) ends here only once the
        plugin process says no writing call of the device runs there (`Settle`), as a call in
        process ends only once its shielded work has: until then the caller holds the device (its
        shard lease is not handed on), and a `RELINQUISHED` cancel meanwhile is told on."""
        # NOTE: the call runs in a task of its own, behind a shield: a cancel's reason does not
        # survive gRPC's call object, and it is read here, where the cancel arrives
        call = asyncio.ensure_future(self._operate(kind, ctx, request))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError as exc:
            call.cancel()
            await asyncio.wait((call,))
            if not call.cancelled():
                call.exception()  # came after the cancel: dropped
            if relinquished(exc):
                await self._relinquish(ctx.device_id)
            elif kind.may_write(request):
                await self._settle(ctx.device_id)
            raise
        except _Unanswered:
            if kind.may_write(request):
                await self._settle(ctx.device_id)
            raise

    async def _settle(self, device_id: str) -> None:
        """Wait until the plugin process runs no writing call of `device_id` (`Settle`), bounded. A
        plain cancel meanwhile waits for it, as `uncancelled` does; a `RELINQUISHED` one ends the
        wait and is told on (`Relinquish`)."""
        try:
            await uncancelled(self._settled(device_id))
        except asyncio.CancelledError as exc:
            if relinquished(exc):
                await self._relinquish(device_id)
            raise

    async def _settled(self, device_id: str) -> None:
        message = ppb.SettleRequest(device_ids=[device_id], wait_seconds=w.SETTLE_WAIT)
        await self._about_writers(device_id, "Settle", message, w.SETTLE_WAIT)

    async def _relinquish(self, device_id: str) -> None:
        """Tell the plugin process that `device_id` is no longer ours to write (`Relinquish`); bounded."""
        message = ppb.RelinquishRequest(device_ids=[device_id])
        await self._about_writers(device_id, "Relinquish", message, w.RELINQUISH_WAIT)

    async def _about_writers(self, device_id: str, rpc: str, message: Any, wait: float) -> None:
        """Send `rpc` (`Settle`, `Relinquish`) about `device_id`'s writing calls in the plugin
        process, which answers within `wait` seconds; what it could not do is logged."""
        conn = self.connection
        if conn is None:
            return
        name = self.spec.name
        try:
            reply = await getattr(conn.power, rpc)(message, timeout=wait + 5.0)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.UNIMPLEMENTED:
                log.info(
                    "plugin %s offers no %s: its writing calls of %s end on their own", name, rpc, device_id
                )
            else:
                log.warning("plugin %s: %s of %s failed: %s", name, rpc, device_id, err.details())
            return
        if reply.running:
            log.warning(
                "plugin %s: %d writing call(s) of %s still ran %g s after %s",
                name,
                reply.running,
                device_id,
                wait,
                rpc,
            )

    async def _operate(self, kind: Kind, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        conn = await self._available(ctx.remaining())
        if conn is self._gone:  # an earlier call found it dead; the supervisor has not yet noticed
            conn = await self._replaced(conn, ctx.remaining())
        what = f"{kind.method} (devicectl power operations)"
        try:
            reply = await self._call(what, self._power_call(conn, kind, ctx, request), unsent=True)
        except _Unsent:
            # the plugin was gone before this call: it never reached it, so it runs once the
            # supervisor has restarted the plugin (within the request's deadline), as a request
            # arriving during a restart does
            self._gone = conn
            conn = await self._replaced(conn, ctx.remaining())
            reply = await self._call(what, self._power_call(conn, kind, ctx, request))
        except _WentAway as exc:
            if self._conn is conn:
                self._gone = conn  # it went away under this call: the next ones wait for it
            raise exc.error from None
        self._last_reply = time.monotonic()
        return w.outcome_from_pb(kind, reply)

    @staticmethod
    def _power_call(conn: Connection, kind: Kind, ctx: DeviceContext, request: Any) -> Awaitable[Any]:
        message = w.request_to_pb(ctx, request, kind.name)
        return conn.power.Operate(message, timeout=max(ctx.remaining(), 0.001))  # type: ignore[no-any-return]

    async def _replaced(self, old: Connection, wait: float) -> Connection:
        """The connection that replaced `old` (the supervisor restarted the plugin), or `old`
        again if it answered a health check meanwhile; waits up to `wait` seconds."""
        deadline = time.monotonic() + wait
        while not (
            self._ready.is_set()
            and self._conn is not None
            and (self._conn is not old or self._gone is not old)
        ):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransientError(
                    f"plugin {self.spec.name} is not running "
                    f"(restarting after: {self.last_error or 'its connection failed'}); retry later"
                )
            await asyncio.sleep(min(0.05, left))
        assert self._conn is not None
        return self._conn

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        conn = await self._available(ctx.remaining())
        msg = ppb.VerifyRequest(context=w.request_to_pb(ctx, None), pending_json=json.dumps(encode(pending)))
        reply = await self._call("verify", conn.power.Verify(msg, timeout=max(ctx.remaining(), 0.001)))
        if reply.HasField("error"):
            raise w.error_from(reply.error.code, reply.error.message, reply.error.retryable)
        return VerificationResult(done=reply.done, status=reply.status, detail=reply.detail)

    async def forget(self, device_id: str) -> None:
        conn = self.connection
        if conn is not None:
            with contextlib.suppress(DeviceControllerError):
                await self._call(
                    "forget", conn.power.Forget(ppb.ForgetRequest(device_id=device_id), timeout=5.0)
                )

    # ---- Nomad's trio -------------------------------------------------------------------------

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        conn = await self._available(10.0)
        request = dpb.ReserveRequest(device_ids=list(device_ids))
        reply = await self._call("reserve", conn.device.Reserve(request, timeout=30.0))
        return n.reservation_from_pb(reply)

    async def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncIterator[FingerprintResponse]:
        request = ppb.TargetsRequest(targets=[w.target_to_pb(t) for t in targets])
        nomad = dpb.FingerprintRequest()
        async for item in self._stream("FingerprintTargets", "Fingerprint", request, nomad):
            yield item if isinstance(item, FingerprintResponse) else n.groups_from_pb(item)

    async def stats(self, targets: Sequence[DeviceTarget], interval: float) -> AsyncIterator[StatsResponse]:
        every = Duration()
        every.FromNanoseconds(int(interval * 1e9))
        targets_pb = [w.target_to_pb(t) for t in targets]
        request = ppb.StatsTargetsRequest(targets=targets_pb, collection_interval=every)
        nomad = dpb.StatsRequest(collection_interval=every)
        async for item in self._stream("StatsTargets", "Stats", request, nomad):
            if isinstance(item, FingerprintResponse):  # an error, carried as data
                yield StatsResponse(error=item.error)
            else:
                yield n.stats_from_pb(item)

    async def _stream(self, ours: str, nomads: str, request: Any, nomad_request: Any) -> AsyncIterator[Any]:
        """Messages of our targeted stream, or Nomad's when the plugin lacks ours (a Nomad binary).

        An error ends the stream as one FingerprintResponse carrying it (errors are data).
        """
        try:
            conn = await self._available(10.0)
        except DeviceControllerError as exc:
            yield FingerprintResponse(error=exc)
            return
        started = False
        try:
            async for msg in getattr(conn.power, ours)(request):
                started = True
                yield msg
            return
        except grpc.aio.AioRpcError as err:
            if started or err.code() != grpc.StatusCode.UNIMPLEMENTED or self._trailer_error(err):
                yield FingerprintResponse(error=self._error(err, ours))
                return
        except asyncio.CancelledError:
            if (error := self._went_away(ours)) is None:
                raise
            yield FingerprintResponse(error=error)
            return
        try:
            async for msg in getattr(conn.device, nomads)(nomad_request):
                yield msg
        except grpc.aio.AioRpcError as err:
            yield FingerprintResponse(error=self._error(err, nomads))
        except asyncio.CancelledError:
            if (error := self._went_away(nomads)) is None:
                raise
            yield FingerprintResponse(error=error)


class _Unanswered(DeviceTimeoutError):
    """The plugin did not answer a call before its deadline (gRPC's DEADLINE_EXCEEDED, not an
    error the plugin answered with): the call may still run there."""


class _Unsent(Exception):
    """A call failed before it was sent: the channel had no connection to the plugin."""


class _WentAway(Exception):
    """A call failed because the plugin's connection was lost under it (`error` says so)."""

    def __init__(self, error: DeviceControllerError) -> None:
        super().__init__(str(error))
        self.error = error


def _connection_lost(err: grpc.aio.AioRpcError) -> bool:
    """UNAVAILABLE or CANCELLED that the plugin did not send itself (no error trailer)."""
    codes = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    return err.code() in codes and not RemotePlugin._trailer_error(err)


def _never_sent(err: grpc.aio.AioRpcError) -> bool:
    """Whether gRPC failed the call without sending it.

    NOTE: a call on a channel without a connection (in TRANSIENT_FAILURE: the plugin's socket is
    gone) fails at once with UNAVAILABLE "failed to connect to all addresses" and is never sent.
    Between a plugin's death and the supervisor noticing it (milliseconds), a request that starts
    meets exactly that; it used to be failed as if the plugin had died under it.
    """
    return err.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in (err.details() or "")


def _forward(kind: Kind) -> Any:
    async def operation(self: RemotePlugin, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        return await self.operate(kind, ctx, request)

    operation.__name__ = operation.__qualname__ = kind.method
    return operation


# the named coroutines of the built-in kinds (`proxy.ping(ctx, Ping())`), as the plugin has them;
# `operate` serves every kind, those registered later included
for _kind in KINDS:
    setattr(RemotePlugin, _kind.method, _forward(_kind))
