"""Serve a `DevicePlugin` as its own process, the way a Nomad client expects (go-plugin over gRPC).

One gRPC server carries Nomad's `DevicePlugin` and `BasePlugin` services, go-plugin's health
(`plugin` SERVING), `GRPCController`, `GRPCStdio` and `GRPCBroker`, and devicectl's
`PowerOperations` extension. The process refuses to start without Nomad's magic cookie (unless
run by hand), then prints the one handshake line on stdout and serves until the host calls
`Shutdown` or sends SIGTERM; like go-plugin's server it ignores SIGINT when a host started it.
SetConfig is decoded with the plugin's own spec (`plugins.base.plugin_config`), and a fingerprint is
checked against Nomad's validation rules before it is sent (`plugins.base._nomad_rules`). Logs go
to stderr: stdout belongs to the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from plugins._proto.devicectl.plugin.v1 import power_pb2 as ppb
from plugins._proto.goplugin import grpc_broker_pb2_grpc as brgrpc
from plugins._proto.goplugin import grpc_controller_pb2 as gcpb
from plugins._proto.goplugin import grpc_controller_pb2_grpc as gcgrpc
from plugins._proto.goplugin import grpc_stdio_pb2 as stpb
from plugins._proto.goplugin import grpc_stdio_pb2_grpc as stgrpc
from plugins._proto.nomad.plugins.base import base_pb2 as bpb
from plugins._proto.nomad.plugins.base import base_pb2_grpc as bgrpc
from plugins._proto.nomad.plugins.device import device_pb2 as dpb
from plugins._proto.nomad.plugins.device import device_pb2_grpc as dgrpc
from plugins.base import _errors as e
from plugins.base import nomad as n
from plugins.base import wire as w
from plugins.base._nomad_rules import fingerprint_problems
from plugins.base._plugin import DeviceContext, DevicePlugin, DeviceTarget, PendingVerification
from plugins.base.codec import decode, encode
from plugins.base.health import relinquish
from plugins.base.plugin_config import ConfigSpec, settings, unpack_config
from plugins.base.receipts import WriteLog, recording

log = logging.getLogger(__name__)

#: go-plugin's handshake as Nomad configures it (Nomad's plugins/base/plugin.go)
MAGIC_COOKIE_KEY = "NOMAD_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE_VALUE = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
CORE_PROTOCOL_VERSION = 1
APP_PROTOCOL_VERSION = 2
#: device plugin API versions this server speaks (Nomad's device.ApiVersion010)
API_VERSIONS = ("v0.1.0",)


def plugin_config_schema(plugin: DevicePlugin) -> Mapping[str, Any]:
    """The plugin-level config schema (`plugin_config_schema()`; none: the plugin takes no config).

    Never the per-device `config_schema()`: a Nomad operator writes plugin-level settings in
    `plugin "x" { config { ... } }`, while per-device options live in devicectl's inventory.
    """
    hook = getattr(plugin, "plugin_config_schema", None)
    return dict(hook()) if callable(hook) else {"type": "object", "properties": {}}


def config_spec(plugin: DevicePlugin) -> ConfigSpec:
    """The plugin's config spec as its `ConfigSchema` advertises it (and as SetConfig decodes)."""
    return ConfigSpec.from_pb(n.schema_to_hcl(plugin_config_schema(plugin)))


async def apply_config(plugin: DevicePlugin, config: Mapping[str, Any]) -> None:
    """Hand decoded plugin-level config (set or defaulted values) to the optional `set_config` hook."""
    hook: Callable[[Mapping[str, Any]], Any] | None = getattr(plugin, "set_config", None)
    if hook is None:
        if config:
            raise e.InvalidRequestError(f"plugin {plugin.info.name} takes no plugin config")
        return
    result = hook(config)
    if inspect.isawaitable(result):
        await result


async def _abort(context: grpc.aio.ServicerContext, exc: e.DeviceControllerError) -> None:
    context.set_trailing_metadata(w.error_trailers(exc))
    await context.abort(w.status_of(exc), exc.message)


class _State:
    """The served plugin, the API version the host chose, the stop signal, and one writer per
    device (`writer`)."""

    def __init__(self, plugin: DevicePlugin) -> None:
        self.plugin = plugin
        self.api_version = ""
        self.stopped = asyncio.Event()
        #: device -> (its writing calls' lock, the calls' tasks holding or waiting for it)
        self._writers: dict[str, tuple[asyncio.Lock, set[asyncio.Task[Any]]]] = {}

    @contextlib.asynccontextmanager
    async def writer(self, device: str) -> AsyncIterator[None]:
        """One writing call per device at a time in this process. A call the host cancelled (its
        deadline, a stop) ends only once the work it shields has ended (a write cycle's restore,
        `uncancelled`); the host's next call of the device, its own restore among them, waits for
        that here, so the two never write the BMC side by side. `relinquish` cuts them all."""
        lock, calls = self._writers.get(device, (asyncio.Lock(), set()))
        self._writers[device] = (lock, calls)
        task = asyncio.current_task()
        if task is not None:
            calls.add(task)
        try:
            async with lock:
                yield
        finally:
            calls.discard(task)  # type: ignore[arg-type]
            if not calls:
                del self._writers[device]

    async def relinquish(self, devices: Sequence[str], wait: float) -> tuple[int, int]:
        """The host no longer holds `devices`: cancel their writing calls with `RELINQUISHED`, which
        cuts the work a call shields too (`uncancelled`), and wait up to `wait` seconds for them to
        end. (calls cancelled, of those still running)."""
        tasks = self._running(devices)
        for task in tasks:
            relinquish(task)
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        return len(tasks), sum(1 for t in tasks if not t.done())

    async def settle(self, devices: Sequence[str], wait: float) -> int:
        """Wait up to `wait` seconds until no writing call of `devices` runs here (the host gave up
        on one: its shielded work may still write); how many still run."""
        tasks = self._running(devices)
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
        return sum(1 for t in tasks if not t.done())

    def _running(self, devices: Sequence[str]) -> list[asyncio.Task[Any]]:
        """The writing calls of `devices` still running here."""
        return [t for d in devices if d in self._writers for t in self._writers[d][1] if not t.done()]


class BasePluginServicer(bgrpc.BasePluginServicer):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def PluginInfo(self, request: Any, context: Any) -> bpb.PluginInfoResponse:
        info = self._s.plugin.info
        return bpb.PluginInfoResponse(
            type=bpb.DEVICE,
            plugin_api_versions=list(API_VERSIONS),
            plugin_version=info.version,
            name=info.name,
        )

    async def ConfigSchema(self, request: Any, context: Any) -> bpb.ConfigSchemaResponse:
        return bpb.ConfigSchemaResponse(spec=n.schema_to_hcl(plugin_config_schema(self._s.plugin)))

    async def SetConfig(self, request: bpb.SetConfigRequest, context: Any) -> bpb.SetConfigResponse:
        if request.plugin_api_version not in API_VERSIONS:
            await _abort(
                context,
                e.InvalidRequestError(
                    f"plugin API version {request.plugin_api_version!r} is not supported "
                    f"(this plugin speaks {', '.join(API_VERSIONS)})"
                ),
            )
        try:
            config = unpack_config(config_spec(self._s.plugin), request.msgpack_config)
            await apply_config(self._s.plugin, settings(config))
        except e.DeviceControllerError as exc:
            await _abort(context, exc)
        self._s.api_version = request.plugin_api_version
        return bpb.SetConfigResponse()


async def _stream(
    items: AsyncIterator[Any], context: grpc.aio.ServicerContext, convert: Callable[[Any], Any]
) -> AsyncIterator[Any]:
    """Responses as messages; an error ends the stream with its status, as Nomad's server does."""
    try:
        async for item in items:
            if item.error is not None:
                await _abort(context, item.error)
            yield convert(item.groups)
    except e.DeviceControllerError as exc:
        await _abort(context, exc)


def checked_groups_to_pb(groups: tuple[Any, ...]) -> dpb.FingerprintResponse:
    """A fingerprint as Nomad's message, after Nomad's own validation rules: a Nomad client
    drops every device of a plugin whose fingerprint fails them, so fail loudly here instead."""
    problems = fingerprint_problems(groups)
    if problems:
        raise e.DeviceControllerError(f"fingerprint fails Nomad's validation: {'; '.join(problems)}")
    return n.groups_to_pb(groups)


class DevicePluginServicer(dgrpc.DevicePluginServicer):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def Fingerprint(self, request: Any, context: Any) -> AsyncIterator[dpb.FingerprintResponse]:
        async for msg in _stream(self._s.plugin.fingerprint(()), context, checked_groups_to_pb):
            yield msg

    async def Stats(self, request: dpb.StatsRequest, context: Any) -> AsyncIterator[dpb.StatsResponse]:
        interval = request.collection_interval.ToNanoseconds() / 1e9 or 1.0
        async for msg in _stream(self._s.plugin.stats((), interval), context, n.stats_to_pb):
            yield msg

    async def Reserve(self, request: dpb.ReserveRequest, context: Any) -> dpb.ReserveResponse:
        try:
            res = await self._s.plugin.reserve(tuple(request.device_ids))
        except e.DeviceControllerError as exc:
            await _abort(context, exc)
        return n.reservation_to_pb(res)


class ControllerServicer(gcgrpc.GRPCControllerServicer):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def Shutdown(self, request: Any, context: Any) -> gcpb.Empty:
        self._s.stopped.set()
        return gcpb.Empty()


class StdioServicer(stgrpc.GRPCStdioServicer):
    """go-plugin's stdio stream. Our logs go to stderr, which every host reads directly (a Nomad
    client discards the stdio stream unless configured otherwise), so the stream stays open and
    quiet until the plugin stops: a host that asks for it gets an answer, not UNIMPLEMENTED."""

    def __init__(self, state: _State) -> None:
        self._s = state

    async def StreamStdio(self, request: Any, context: Any) -> AsyncIterator[stpb.StdioData]:
        await self._s.stopped.wait()
        return
        yield  # an async generator that sends nothing


class BrokerServicer(brgrpc.GRPCBrokerServicer):
    """go-plugin's broker. We offer the host no extra servers and dial none of its: read what the
    host announces until it closes the stream or the plugin stops."""

    def __init__(self, state: _State) -> None:
        self._s = state

    async def StartStream(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        async def read() -> None:
            async for info in request_iterator:
                log.debug("broker: the host offers service %d at %s", info.service_id, info.address)

        reader = asyncio.ensure_future(read())
        stopping = asyncio.ensure_future(self._s.stopped.wait())
        try:
            await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            stopping.cancel()
        return
        yield  # an async generator that sends nothing


def checked_context(plugin: DevicePlugin, request: ppb.OperationRequest) -> DeviceContext:
    """The call's context after the plugin's own model and state checks (the host cannot run them:
    they are synchronous hooks, so the process that owns the schema runs them)."""
    ctx = w.context_from_pb(request)
    plugin.check_model(ctx.model)
    try:
        loaded = plugin.load_state(ctx.state)
    except e.InvalidRequestError as exc:
        raise e.InvalidRequestError(f"device state: {exc.message}") from None
    return dataclasses.replace(ctx, state=loaded)


def _receipts(writes: WriteLog) -> str:
    """The receipts an error carries back (JSON; "[]": none was made, so none may have landed)."""
    return json.dumps(encode(writes.entries()))


def _power_handler(state: _State) -> grpc.GenericRpcHandler:
    """PowerOperations: `Operate` decodes a kind, context and request, runs the plugin's coroutine of
    that kind (`DevicePlugin.operate`) and encodes the outcome."""

    async def operate(request: ppb.OperationRequest, context: Any) -> ppb.OperationResponse:
        what = request.kind or "an operation without a kind"
        writes = WriteLog()  # replaced below by one in the request's dry-run mode
        try:
            kind = w.kind_from_pb(request)
            ctx = checked_context(state.plugin, request)
            # the write log honours the host's dry run (a plan, or a controller in shadow
            # mode) at the plugin's write choke point, and its receipts go back with the outcome
            # or with the error (every write's receipt, "[]" when none was made)
            writes = WriteLog(dry_run=ctx.dry_run)
            query = w.request_from_pb(kind, request)
            writing = kind.may_write(query)
            async with state.writer(ctx.device_id) if writing else contextlib.nullcontext():
                with recording(writes):
                    outcome = await state.plugin.operate(kind, ctx, query)
            if writes.entries():
                outcome = dataclasses.replace(outcome, writes=(*outcome.writes, *writes.entries()))
            return w.outcome_to_pb(outcome)
        except e.DeviceControllerError as exc:
            return ppb.OperationResponse(error=w.error_to_pb(exc), writes_json=_receipts(writes))
        except Exception as exc:  # reported as data: the host answers the request with it
            log.exception("%s raised an unexpected error", what)
            error = e.DeviceControllerError(f"internal error in plugin: {type(exc).__name__}: {exc}")
            return ppb.OperationResponse(error=w.error_to_pb(error), writes_json=_receipts(writes))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise  # this call really is being cancelled (the host gave up, or shutdown)
            # a cancellation that escaped the plugin's own code: an error of this request only
            log.exception("%s: a cancellation escaped the plugin", what)
            error = e.TransientError("plugin: the operation was cancelled inside the plugin")
            return ppb.OperationResponse(error=w.error_to_pb(error), writes_json=_receipts(writes))

    async def verify(request: ppb.VerifyRequest, context: Any) -> ppb.VerifyResponse:
        try:
            pending = decode(PendingVerification, json.loads(request.pending_json), "pending")
            result = await state.plugin.verify(checked_context(state.plugin, request.context), pending)
        except e.DeviceControllerError as exc:
            return ppb.VerifyResponse(error=w.error_to_pb(exc))
        return ppb.VerifyResponse(done=result.done, status=result.status, detail=result.detail)

    def targets(msg: Any) -> tuple[DeviceTarget, ...]:
        return tuple(DeviceTarget(**w.target_from_pb(t)) for t in msg.targets)

    async def fingerprint(
        request: ppb.TargetsRequest, context: Any
    ) -> AsyncIterator[dpb.FingerprintResponse]:
        async for msg in _stream(state.plugin.fingerprint(targets(request)), context, checked_groups_to_pb):
            yield msg

    async def stats(request: ppb.StatsTargetsRequest, context: Any) -> AsyncIterator[dpb.StatsResponse]:
        interval = request.collection_interval.ToNanoseconds() / 1e9 or 1.0
        async for msg in _stream(state.plugin.stats(targets(request), interval), context, n.stats_to_pb):
            yield msg

    async def forget(request: ppb.ForgetRequest, context: Any) -> ppb.ForgetResponse:
        await state.plugin.forget(request.device_id)
        return ppb.ForgetResponse()

    async def capabilities(request: ppb.CapabilitiesRequest, context: Any) -> ppb.CapabilitiesResponse:
        # every operation runs under a WriteLog in the request's dry-run mode (above), whose write
        # refuses to open a write in a dry run: a plugin that writes through it can plan
        return ppb.CapabilitiesResponse(dry_run=bool(state.plugin.supports_dry_run))

    async def relinquish(request: ppb.RelinquishRequest, context: Any) -> ppb.RelinquishResponse:
        cancelled, running = await state.relinquish(list(request.device_ids), w.RELINQUISH_WAIT)
        if cancelled:
            log.warning(
                "the host relinquished %s: %d writing call(s) cut%s",
                ", ".join(request.device_ids),
                cancelled,
                f", {running} still running after {w.RELINQUISH_WAIT:g} s" if running else "",
            )
        return ppb.RelinquishResponse(cancelled=cancelled, running=running)

    async def settle(request: ppb.SettleRequest, context: Any) -> ppb.SettleResponse:
        asked = request.wait_seconds  # the host's number, bounded here: NaN waits not at all
        wait = 0.0 if math.isnan(asked) else min(max(asked, 0.0), w.SETTLE_WAIT_MAX)
        running = await state.settle(list(request.device_ids), wait)
        return ppb.SettleResponse(running=running)

    def h(fn: Any, req: Any, resp: Any, stream: bool = False) -> grpc.RpcMethodHandler:
        make = grpc.unary_stream_rpc_method_handler if stream else grpc.unary_unary_rpc_method_handler
        return make(fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)

    handlers = {"Operate": h(operate, ppb.OperationRequest, ppb.OperationResponse)}
    handlers["Verify"] = h(verify, ppb.VerifyRequest, ppb.VerifyResponse)
    handlers["FingerprintTargets"] = h(fingerprint, ppb.TargetsRequest, dpb.FingerprintResponse, True)
    handlers["StatsTargets"] = h(stats, ppb.StatsTargetsRequest, dpb.StatsResponse, True)
    handlers["Forget"] = h(forget, ppb.ForgetRequest, ppb.ForgetResponse)
    handlers["Capabilities"] = h(capabilities, ppb.CapabilitiesRequest, ppb.CapabilitiesResponse)
    handlers["Relinquish"] = h(relinquish, ppb.RelinquishRequest, ppb.RelinquishResponse)
    handlers["Settle"] = h(settle, ppb.SettleRequest, ppb.SettleResponse)
    return grpc.method_handlers_generic_handler(w.SERVICE, handlers)


def check_cookie(env: Mapping[str, str], manual: bool) -> str | None:
    """Why this process must not serve, or None. Nomad sets the cookie; a person uses `--manual`."""
    if manual or env.get(MAGIC_COOKIE_KEY) == MAGIC_COOKIE_VALUE:
        return None
    return (
        f"this is a device plugin, started by a Nomad client or devicectl (they set {MAGIC_COOKIE_KEY}); "
        "to run it by hand, pass --manual"
    )


async def serve_async(
    plugin: DevicePlugin,
    *,
    address: str | None = None,
    announce: Callable[[str], None] | None = None,
    ignore_interrupts: bool = False,
) -> None:
    """Serve until Shutdown or SIGTERM. `address`: "unix:PATH", "HOST:PORT", or None (a fresh socket).

    `ignore_interrupts`: a plugin started by a host runs in the host's process group, so a Ctrl-C
    meant for the host reaches it too; like go-plugin's server it ignores SIGINT and leaves its
    shutdown to the host (`Shutdown`, or SIGKILL).
    """
    state = _State(plugin)
    # its own identity towards devices, apart from the controller on the same host (whose instance
    # id is the default): `plugins.base.identity` makes it unique among live processes
    plugin.set_client_id(f"{os.environ.get('DEVICECTL_INSTANCE_ID') or socket.gethostname()}-plugin")
    await plugin.start()
    # gRPC cancels a call its server has not picked up within 30 s by default; a plugin busy with a
    # large fan-out can lag that much, and each call already carries the request's own deadline
    server = grpc.aio.server(options=[("grpc.server_max_unrequested_time_in_server", 24 * 3600)])
    dgrpc.add_DevicePluginServicer_to_server(DevicePluginServicer(state), server)
    bgrpc.add_BasePluginServicer_to_server(BasePluginServicer(state), server)
    gcgrpc.add_GRPCControllerServicer_to_server(ControllerServicer(state), server)
    stgrpc.add_GRPCStdioServicer_to_server(StdioServicer(state), server)
    brgrpc.add_GRPCBrokerServicer_to_server(BrokerServicer(state), server)
    server.add_generic_rpc_handlers((_power_handler(state),))
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    tmpdir: str | None = None
    if address is None:
        tmpdir = tempfile.mkdtemp(prefix="devicectl-plugin-", dir=os.environ.get("PLUGIN_UNIX_SOCKET_DIR"))
        address = f"unix:{Path(tmpdir) / 'plugin.sock'}"
    # go-plugin's AutoMTLS: a host that sent its certificate gets TLS and ours in the handshake
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "")
    cert_field = ""
    if client_cert:
        from plugins.base import _mtls  # cryptography only where a host asks for AutoMTLS

        creds, cert_field = _mtls.server_credentials(client_cert)
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if address.startswith("unix:"):
        network, where = "unix", address.removeprefix("unix:").removeprefix("//")
    else:
        network, where = "tcp", f"{address.rsplit(':', 1)[0]}:{port}"
    await server.start()
    for name in ("plugin", ""):
        await checks.set(name, health_pb2.HealthCheckResponse.SERVING)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, state.stopped.set)
    if ignore_interrupts:
        loop.add_signal_handler(signal.SIGINT, log.debug, "interrupt ignored: the host shuts the plugin down")
    else:
        loop.add_signal_handler(signal.SIGINT, state.stopped.set)
    line = f"{CORE_PROTOCOL_VERSION}|{APP_PROTOCOL_VERSION}|{network}|{where}|grpc"
    (announce or _print_line)(f"{line}|{cert_field}" if cert_field else line)
    try:
        await state.stopped.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        # go-plugin's own server stops at once on Shutdown; a short grace lets answers in flight
        # go out, while streams a host left open (Fingerprint, Stats) must not hold the exit:
        # go-plugin's Kill gives the process 2 s before SIGKILL
        await server.stop(grace=0.5)
        await plugin.close()
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def serve(plugin: DevicePlugin, *, address: str | None = None, manual: bool = False) -> int:
    """Serve `plugin` out of process (go-plugin handshake on stdout); returns the exit status."""
    problem = check_cookie(os.environ, manual)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not manual:  # from the start, not only once serving: the host's Ctrl-C is the host's
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(serve_async(plugin, address=address, ignore_interrupts=not manual))
    except e.DeviceControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
