"""The server end of the agent stream, for tests and demos (served by `devicectl topology-sink`).

`AgentHub` accepts agents on `AgentService.Connect` (under mutual TLS the client certificate's CN
must equal the handshake's agent id), routes each request to the agent that owns its device (the
handshake's device list, or a routing file), records each response once (duplicates on
request_id are acknowledged and counted, not recorded twice) and lists agents for `devicectl sink
agents`. Requests enter through the sink's own `DeviceController.SendDeviceRequest`, acknowledged
once the owning agent acknowledged (journaled) them, so `devicectl send` works against the sink.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import agent_pb2 as apb
from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller.delivery.agent import PROTOCOL_VERSION

log = logging.getLogger(__name__)

#: after an agent answers queue_full, new requests for it are refused for this long (seconds)
QUEUE_FULL_PAUSE = 0.5
#: how long SendDeviceRequest waits for the agent's RequestAck (seconds)
ACK_TIMEOUT = 10.0


class RefusedError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass
class AgentState:
    agent_id: str
    devices: list[str] = field(default_factory=list)
    version: str = ""
    connected: bool = False
    last_seen: float = 0.0
    max_in_flight: int = 1
    out: asyncio.Queue[apb.ServerMessage | None] | None = None
    pending: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    paused_until: float = 0.0
    responses: int = 0
    duplicates: int = 0


def load_routes(path: str | Path) -> dict[str, str]:
    """A routing file: a JSON object mapping device id -> agent id."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError(f"{path}: expected a JSON object of device id -> agent id")
    return {str(k): v for k, v in data.items()}


class AgentHub(agrpc.AgentServiceServicer, agrpc.AgentAdminServicer, dgrpc.DeviceControllerServicer):
    def __init__(
        self,
        record: Callable[[pb.DeviceControllerResponse, list[str]], Awaitable[None]],
        *,
        mutual_tls: bool,
        routes: dict[str, str] | None = None,
        ping_interval: int = 0,
        stale_after: float = 60.0,
    ) -> None:
        self._record = record
        self._mutual = mutual_tls
        self._routes = dict(routes or {})
        self._ping_interval = ping_interval
        #: an agent silent this long (it pings every agent_ping_interval) is dropped: a half-open
        #: connection must not keep owning its devices
        self.stale_after = stale_after
        self.agents: dict[str, AgentState] = {}
        self._seen: set[str] = set()

    # --- AgentService ---
    async def Connect(
        self, request_iterator: AsyncIterator[apb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.ServerMessage]:
        try:
            first = await asyncio.wait_for(anext(request_iterator), 10.0)
        except (TimeoutError, StopAsyncIteration):
            yield _error("invalid_handshake", "the first message must be a Handshake")
            return
        peers = [n.decode(errors="replace") for n in context.auth_context().get("x509_common_name", ())]
        problem = self._check(first, peers)
        if problem is not None:
            log.warning("agent refused: %s: %s", problem[0], problem[1])
            yield _error(*problem)
            return
        hello = first.handshake
        state = self.agents.setdefault(hello.agent_id, AgentState(hello.agent_id))
        if state.connected and state.out is not None:
            state.out.put_nowait(None)  # a reconnect replaces the old stream
        out: asyncio.Queue[apb.ServerMessage | None] = asyncio.Queue()
        state.devices, state.version = list(hello.devices), hello.version
        state.max_in_flight = max(1, hello.max_in_flight or 1)
        state.connected, state.out, state.last_seen = True, out, time.time()
        log.info("agent %s connected with %d devices", hello.agent_id, len(hello.devices))
        yield apb.ServerMessage(
            accepted=apb.HandshakeAccepted(
                server_id="devicectl-topology-sink",
                config=apb.RemoteConfig(ping_interval_seconds=self._ping_interval),
            )
        )
        reader = asyncio.create_task(self._read(state, request_iterator, out))
        try:
            while True:
                try:
                    message = await asyncio.wait_for(out.get(), self.stale_after / 4)
                except TimeoutError:
                    if time.time() - state.last_seen > self.stale_after:
                        log.warning(
                            "agent %s silent for %.0f s: dropping its stream",
                            state.agent_id,
                            self.stale_after,
                        )
                        break
                    continue
                if message is None:
                    break
                yield message
        finally:
            reader.cancel()
            if state.out is out:
                state.connected, state.out = False, None
                for future in state.pending.values():
                    if not future.done():
                        future.set_exception(RefusedError("unavailable", "agent stream dropped"))
                state.pending.clear()
            log.info("agent %s disconnected", state.agent_id)

    def _check(self, first: apb.AgentMessage, peers: list[str]) -> tuple[str, str] | None:
        if first.WhichOneof("message") != "handshake" or not first.handshake.agent_id:
            return "invalid_handshake", "the first message must be a Handshake with an agent_id"
        hello = first.handshake
        if hello.protocol_version != PROTOCOL_VERSION:
            return (
                "version_unsupported",
                f"protocol {hello.protocol_version} (this server: {PROTOCOL_VERSION})",
            )
        if self._mutual and hello.agent_id not in peers:
            return (
                "invalid_handshake",
                f"agent id {hello.agent_id!r} is not the client certificate's identity",
            )
        if self._routes and hello.agent_id not in self._routes.values():
            return "unknown_agent", f"agent {hello.agent_id!r} owns no device in the routing file"
        return None

    async def _read(
        self,
        state: AgentState,
        messages: AsyncIterator[apb.AgentMessage],
        out: asyncio.Queue[apb.ServerMessage | None],
    ) -> None:
        try:
            async for message in messages:
                state.last_seen = time.time()
                which = message.WhichOneof("message")
                if which == "response":
                    response = message.response.response
                    if response.request_id in self._seen:
                        state.duplicates += 1
                    else:
                        self._seen.add(response.request_id)
                        state.responses += 1
                        await self._record(response, [state.agent_id])
                    out.put_nowait(
                        apb.ServerMessage(response_ack=apb.ResponseAck(request_id=response.request_id))
                    )
                elif which == "request_ack":
                    _settle(state.pending.pop(message.request_ack.request_id, None), None)
                elif which == "error":
                    error = message.error
                    if error.code == "queue_full":
                        state.paused_until = time.monotonic() + QUEUE_FULL_PAUSE
                    _settle(
                        state.pending.pop(error.request_id, None), RefusedError(error.code, error.message)
                    )
                elif which == "ping":
                    out.put_nowait(apb.ServerMessage(pong=apb.Pong(nonce=message.ping.nonce)))
                elif which == "alert":
                    log.warning(
                        "alert from %s: %s %s", state.agent_id, message.alert.device, message.alert.message
                    )
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            out.put_nowait(None)

    def remember(self, request_ids: set[str]) -> None:
        """Responses already recorded before a restart (a real server keeps them durably), so a
        re-sent one is acknowledged and counted as a duplicate, not recorded twice."""
        self._seen |= request_ids

    def disconnect(self, agent_id: str) -> bool:
        """End an agent's stream (it reconnects): drills, and replacing a stale stream."""
        state = self.agents.get(agent_id)
        if state is None or state.out is None:
            return False
        state.out.put_nowait(None)
        return True

    def owner(self, device: str) -> AgentState | None:
        if self._routes:  # a routing file is authoritative
            agent_id = self._routes.get(device)
        else:
            agent_id = next((a.agent_id for a in self.agents.values() if device in a.devices), None)
        return self.agents.get(agent_id) if agent_id else None

    async def route(self, request: pb.DeviceControllerRequest) -> None:
        """Send a request to its device's agent; returns once the agent journaled it."""
        state = self.owner(request.device)
        if state is None:
            raise RefusedError("unknown_device", f"no agent owns device {request.device!r}")
        if not state.connected or state.out is None:
            raise RefusedError("unavailable", f"agent {state.agent_id} is not connected")
        if time.monotonic() < state.paused_until or len(state.pending) >= state.max_in_flight:
            raise RefusedError("queue_full", f"agent {state.agent_id} is full; retry later")
        future = state.pending.get(request.request_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            state.pending[request.request_id] = future
            state.out.put_nowait(apb.ServerMessage(request=apb.DeviceRequest(request=request)))
        try:
            await asyncio.wait_for(asyncio.shield(future), ACK_TIMEOUT)
        except TimeoutError:
            state.pending.pop(request.request_id, None)
            raise RefusedError("unavailable", f"agent {state.agent_id} did not acknowledge in time") from None

    # --- DeviceController (the entry point for requests routed to agents) ---
    async def SendDeviceRequest(
        self, request: pb.DeviceControllerRequest, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        try:
            await self.route(request)
        except RefusedError as exc:
            await context.abort(_STATUS.get(exc.code, grpc.StatusCode.FAILED_PRECONDITION), str(exc))
        return empty_pb2.Empty()

    # --- AgentAdmin ---
    async def ListAgents(
        self, request: apb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> apb.ListAgentsResponse:
        return apb.ListAgentsResponse(
            agents=[
                apb.AgentInfo(
                    agent_id=a.agent_id,
                    connected=a.connected,
                    devices=a.devices,
                    last_seen_unix=a.last_seen,
                    queued=len(a.pending),
                    version=a.version,
                    responses=a.responses,
                    duplicates=a.duplicates,
                )
                for a in sorted(self.agents.values(), key=lambda a: a.agent_id)
            ]
        )


_STATUS = {
    "unknown_device": grpc.StatusCode.NOT_FOUND,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "journal_unavailable": grpc.StatusCode.UNAVAILABLE,
    "queue_full": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "invalid_request": grpc.StatusCode.INVALID_ARGUMENT,
}


def _error(code: str, message: str) -> apb.ServerMessage:
    return apb.ServerMessage(error=apb.AgentError(code=code, message=message))


def _settle(future: asyncio.Future[None] | None, error: Exception | None) -> None:
    if future is None or future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
