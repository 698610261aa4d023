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
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration

from controller.plugin_process import Connection, ExternalPlugin, connect
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
)
from plugins.base import _nomad as n
from plugins.base import _wire as w
from plugins.base._codec import encode

log = logging.getLogger(__name__)

#: a plugin that stayed up this long restarts at the shortest backoff again
_STABLE_AFTER = 30.0
#: how long a lost connection waits for the process's exit to be reaped before a health check
_REAP_WAIT = 0.5


class RemotePlugin(DevicePlugin):
    info = PluginInfo(name="external", version="")

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
        #: set by a call that lost the connection; the supervisor checks at once
        self._suspect = asyncio.Event()
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
        """Return why the plugin must be restarted: its process ended, or it stopped answering.

        A call that lost the connection (`_lost`) wakes this at once: until it is settled, new
        calls wait (`_ready` is clear) rather than go to a plugin that may be dead but not yet
        reaped. A plugin that answers its health check is back in service at once."""
        failures, streak_began = 0, 0.0
        exited = asyncio.ensure_future(conn.process.wait()) if conn.process is not None else None
        try:
            while True:
                suspect = asyncio.ensure_future(self._suspect.wait())
                try:
                    await asyncio.wait(
                        {f for f in (exited, suspect) if f is not None}, timeout=self._health_interval
                    )
                finally:
                    suspect.cancel()
                if self._suspect.is_set() and exited is not None and not exited.done():
                    # a dead plugin's calls fail a moment before its exit is reaped
                    await asyncio.wait({exited}, timeout=_REAP_WAIT)
                if exited is not None and exited.done():
                    return f"process exited with status {exited.result()}"
                checked = time.monotonic()
                if failures == 0:
                    streak_began = checked
                healthy = await conn.healthy(self._health_timeout)
                if self._suspect.is_set():
                    self._suspect.clear()
                    if not healthy:
                        return "the connection was lost and the health check failed"
                    self._ready.set()
                # a call finished since this run of failed checks began: busy, not hung
                failures = 0 if healthy or self._last_reply >= streak_began else failures + 1
                if failures >= self._health_failures:
                    return f"no answer to {failures} health checks in a row"
        finally:
            if exited is not None:
                exited.cancel()

    def _lost(self, conn: Connection, err: grpc.aio.AioRpcError) -> None:
        """A call found the connection gone: hold new calls until the supervisor has looked."""
        if (
            err.code() == grpc.StatusCode.UNAVAILABLE
            and not self._trailer_error(err)
            and self._supervisor is not None
            and conn is self._conn
            and not self._closing
        ):
            self._ready.clear()
            self._suspect.set()

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
            return DeviceTimeoutError(f"plugin {self.spec.name} did not answer {what} before the deadline")
        if code == grpc.StatusCode.UNIMPLEMENTED and not self._trailer_error(err):
            return UnsupportedError(f"plugin {self.spec.name} does not offer {what}")
        return w.error_from_status(err, self.spec.name)

    def _cut_off(self, what: str) -> DeviceControllerError:
        """A call cancelled under us, not by our caller: the supervisor closed the connection of a
        plugin that died (when it notices the exit before the call sees the socket close, gRPC
        cancels the call). The same retryable answer as a call that saw the plugin go away."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # our caller cancelled us: let it through
        return TransientError(
            f"plugin {self.spec.name} went away during {what} (it crashed or is restarting); "
            "the request did not complete and may be retried"
        )

    @staticmethod
    def _trailer_error(err: grpc.aio.AioRpcError) -> bool:
        return any(k == w.ERROR_CODE_KEY for k, _ in (err.trailing_metadata() or ()))

    # ---- power operations ---------------------------------------------------------------------

    async def _operate(self, method: str, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        rpc = w.BY_METHOD[method]
        conn = await self._available(ctx.remaining())
        call = getattr(conn.power, rpc.name)
        try:
            reply = await call(w.request_to_pb(ctx, request), timeout=max(ctx.remaining(), 0.001))
        except grpc.aio.AioRpcError as err:
            self._lost(conn, err)
            raise self._error(err, f"{rpc.method} (devicectl power operations)") from None
        except asyncio.CancelledError:
            raise self._cut_off(f"{rpc.method} (devicectl power operations)") from None
        self._last_reply = time.monotonic()
        return w.outcome_from_pb(rpc, reply)

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        conn = await self._available(ctx.remaining())
        msg = ppb.VerifyRequest(context=w.request_to_pb(ctx, None), pending_json=json.dumps(encode(pending)))
        try:
            reply = await conn.power.Verify(msg, timeout=max(ctx.remaining(), 0.001))
        except grpc.aio.AioRpcError as err:
            self._lost(conn, err)
            raise self._error(err, "verify") from None
        except asyncio.CancelledError:
            raise self._cut_off("verify") from None
        if reply.HasField("error"):
            raise w.error_from(reply.error.code, reply.error.message, reply.error.retryable)
        return VerificationResult(done=reply.done, status=reply.status, detail=reply.detail)

    async def forget(self, device_id: str) -> None:
        conn = self.connection
        if conn is not None:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await conn.power.Forget(ppb.ForgetRequest(device_id=device_id), timeout=5.0)

    # ---- Nomad's trio -------------------------------------------------------------------------

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        conn = await self._available(10.0)
        try:
            reply = await conn.device.Reserve(dpb.ReserveRequest(device_ids=list(device_ids)), timeout=30.0)
        except grpc.aio.AioRpcError as err:
            self._lost(conn, err)
            raise self._error(err, "reserve") from None
        except asyncio.CancelledError:
            raise self._cut_off("reserve") from None
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
        try:
            async for msg in getattr(conn.device, nomads)(nomad_request):
                yield msg
        except grpc.aio.AioRpcError as err:
            yield FingerprintResponse(error=self._error(err, nomads))


def _forward(method: str) -> Any:
    async def operation(self: RemotePlugin, ctx: DeviceContext, request: Any) -> Outcome[Any]:
        return await self._operate(method, ctx, request)

    operation.__name__ = operation.__qualname__ = method
    return operation


for _rpc in w.POWER_RPCS:
    setattr(RemotePlugin, _rpc.method, _forward(_rpc.method))
