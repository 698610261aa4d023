"""Agent mode: the controller dials OUT to the topology server's AgentService and serves requests
arriving on that one bidirectional stream (docs/architecture.md, "Two transports").

Requests from the stream take the same ack path as the unary server (`DeviceControllerService.
accept`: validate, journal commit, lane), then a `RequestAck` goes back. Responses leave through
the same outbox: `AgentTransport` is the delivery seam, and a response counts as delivered only
once the server's `ResponseAck` arrives, so per-device order, retries and dead letters are the
outbox's. A response in flight when the stream drops fails as UNAVAILABLE and is sent again on
the next stream (the server de-duplicates on request_id).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import itertools
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable

import grpc
import tenacity

from controller._proto.devicecontroller.v1 import agent_pb2 as apb
from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.api.service import DeviceControllerService, JournalUnavailableError
from controller.config import Settings
from controller.execution.dispatch import Dispatcher
from controller.observability.logs import request_context
from controller.observability.version import installed_version
from controller.security import tls
from plugins.base import InvalidRequestError, RequestKind

log = logging.getLogger(__name__)

#: the agent protocol this build speaks (Handshake.protocol_version)
PROTOCOL_VERSION = 1


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """An error shaped like a failed unary call, so Delivery classifies it the same way."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


def device_filter(patterns: str) -> Callable[[str], bool]:
    """Whether a device is served over the agent stream (`agent_devices` patterns)."""
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    return lambda device: any(fnmatch.fnmatchcase(device, g) for g in globs)


def agent_identity(settings: Settings) -> str:
    """The agent id: the client certificate's CN, else `agent_id` (plaintext on loopback only)."""
    if settings.callback_cert:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        with open(settings.callback_cert, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        cn = str(names[0].value) if names else ""
        if settings.agent_id and settings.agent_id != cn:
            raise ValueError(
                f"agent_id {settings.agent_id!r} differs from the client certificate's CN {cn!r}"
            )
        if cn:
            return cn
    if not settings.agent_id:
        raise ValueError("agent mode needs a client certificate (--callback-cert) or --agent-id")
    if not (tls.is_loopback(settings.agent_server) or settings.insecure):
        # nobody could check an id the agent merely claims
        raise ValueError(
            f"agent server {settings.agent_server} is not on loopback: the agent id must come from a "
            "client certificate (--callback-cert, --callback-key)"
        )
    return settings.agent_id


class AgentTransport:
    """Delivery's transport over the agent stream: send a response, wait for its ResponseAck."""

    def __init__(self) -> None:
        self._out: asyncio.Queue[apb.AgentMessage | None] | None = None
        self._acks: dict[str, asyncio.Future[None]] = {}

    @property
    def connected(self) -> bool:
        return self._out is not None

    def attach(self, out: asyncio.Queue[apb.AgentMessage | None]) -> None:
        self._out = out

    def detach(self) -> None:
        self._out = None
        for future in self._acks.values():
            if not future.done():
                future.set_exception(rpc_error(grpc.StatusCode.UNAVAILABLE, "agent stream dropped"))
        self._acks.clear()

    def acked(self, request_id: str) -> None:
        future = self._acks.get(request_id)
        if future is not None and not future.done():
            future.set_result(None)

    async def send(self, response: pb.DeviceControllerResponse, timeout: float) -> None:
        out = self._out
        if out is None:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "agent stream not connected")
        future = self._acks.setdefault(response.request_id, asyncio.get_running_loop().create_future())
        await out.put(apb.AgentMessage(response=apb.DeviceResponse(response=response)))
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, "no ResponseAck from the agent server"
            ) from None
        finally:
            if self._acks.get(response.request_id) is future:
                del self._acks[response.request_id]


class AgentRefusedError(RuntimeError):
    """The server refused the handshake (code and message from its AgentError)."""


class Agent:
    """Keeps one stream to `settings.agent_server` open, reconnecting with capped jittered backoff."""

    def __init__(
        self,
        settings: Settings,
        service: DeviceControllerService,
        dispatcher: Dispatcher,
        devices: list[str],
        transport: AgentTransport,
        on_connect: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.agent_id = agent_identity(settings)
        self._service = service
        self._dispatcher = dispatcher
        self._devices = devices
        self._owned = frozenset(devices)
        self._transport = transport
        self._on_connect = on_connect
        self._in_flight = 0
        self._accepting: Counter[str] = Counter()  # per device: accepts not yet committed
        self._max_in_flight = max(1, settings.agent_max_in_flight)
        self._ping_interval = settings.agent_ping_interval
        self._tasks: set[asyncio.Task[None]] = set()
        self.sessions = 0  # handshakes accepted (tests, status)
        #: set at shutdown: new requests are refused (queue_full; the server retries elsewhere or
        #: later) while the stream stays up to deliver the responses being flushed
        self.draining = False
        self.last_refusal = ""

    async def run(self) -> None:
        while True:
            # a session that ended cleanly (the server going away) redials soon, with a fresh policy
            async for attempt in self._reconnect_policy():
                with attempt:
                    await self._one_session()
            await asyncio.sleep(random.uniform(0.1, 0.2))

    def _reconnect_policy(self) -> tenacity.AsyncRetrying:
        """Redial after a failed or refused session: 0.2 s doubling up to `agent_reconnect_max`
        (at least 0.2 s), each wait between half and all of that (jitter, so a fleet of agents does
        not redial in step), forever: an agent without its server has nothing else to do."""
        cap = max(0.2, self.settings.agent_reconnect_max)
        return tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(
                (AgentRefusedError, grpc.aio.AioRpcError, OSError, ValueError)
            ),
            wait=_HalfToFullJitter(tenacity.wait_exponential(multiplier=0.2, exp_base=2, max=cap)),
            stop=tenacity.stop_never,
            reraise=True,
        )

    async def _one_session(self) -> None:
        try:
            await self._session()
        except AgentRefusedError as exc:
            self.last_refusal = str(exc)
            log.error("agent server refused this agent: %s", exc)
            raise
        except grpc.aio.AioRpcError as exc:
            log.warning("agent stream to %s ended: %s", self.settings.agent_server, exc.code().name)
            raise
        except (OSError, ValueError) as exc:
            log.warning("agent stream to %s failed: %s", self.settings.agent_server, exc)
            raise
        finally:
            self._transport.detach()

    async def _session(self) -> None:
        # NOTE: keepalive is the stream's own Ping/Pong (data frames), not HTTP/2 keepalive pings: a
        # server's default policy answers frequent transport pings with GOAWAY (too_many_pings).
        options = [
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", int(max(0.2, self.settings.agent_reconnect_max) * 1000)),
        ]
        out: asyncio.Queue[apb.AgentMessage | None] = asyncio.Queue()
        handshake = apb.AgentMessage(
            handshake=apb.Handshake(
                agent_id=self.agent_id,
                version=installed_version(),
                protocol_version=PROTOCOL_VERSION,
                capabilities=[k.value for k in RequestKind],
                devices=self._devices,
                max_in_flight=self._max_in_flight,
            )
        )

        async def outgoing() -> AsyncIterator[apb.AgentMessage]:
            yield handshake
            while (message := await out.get()) is not None:
                yield message

        async with tls.client_channel(
            self.settings.agent_server, tls.callback_tls(self.settings), what="agent server", options=options
        ) as channel:
            call = agrpc.AgentServiceStub(channel).Connect(outgoing())
            try:
                first = await asyncio.wait_for(call.read(), 10.0 + self._ping_interval)
                if first is grpc.aio.EOF or first.WhichOneof("message") != "accepted":
                    error = first.error if first is not grpc.aio.EOF else apb.AgentError(code="closed")
                    raise AgentRefusedError(f"{error.code}: {error.message}")
                self._configure(first.accepted.config)
                self.sessions += 1
                log.info("agent %s connected to %s", self.agent_id, self.settings.agent_server)
                self._transport.attach(out)
                self._on_connect()
                await self._serve(call, out)
            finally:
                out.put_nowait(None)
                call.cancel()

    def _configure(self, config: apb.RemoteConfig) -> None:
        if config.ping_interval_seconds:
            self._ping_interval = float(config.ping_interval_seconds)
        if config.max_in_flight:
            self._max_in_flight = config.max_in_flight

    async def _serve(
        self, call: grpc.aio.StreamStreamCall, out: asyncio.Queue[apb.AgentMessage | None]
    ) -> None:
        loop = asyncio.get_running_loop()
        heard = loop.time()
        nonce = itertools.count(1)

        async def pinger() -> None:
            while True:
                await asyncio.sleep(self._ping_interval)
                if loop.time() - heard > 3 * self._ping_interval:
                    log.warning("agent stream silent for %.0f s: reconnecting", loop.time() - heard)
                    call.cancel()
                    return
                out.put_nowait(apb.AgentMessage(ping=apb.Ping(nonce=next(nonce))))

        ping_task = asyncio.create_task(pinger())
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    return
                heard = loop.time()
                which = message.WhichOneof("message")
                if which == "request":
                    self._receive(message.request.request, out)
                elif which == "response_ack":
                    self._transport.acked(message.response_ack.request_id)
                elif which == "ping":
                    out.put_nowait(apb.AgentMessage(pong=apb.Pong(nonce=message.ping.nonce)))
                elif which == "config":
                    self._configure(message.config)
                elif which == "error":
                    log.warning("agent server: %s: %s", message.error.code, message.error.message)
        finally:
            ping_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ping_task

    def _receive(
        self, request: pb.DeviceControllerRequest, out: asyncio.Queue[apb.AgentMessage | None]
    ) -> None:
        def refuse(code: str, text: str) -> None:
            out.put_nowait(
                apb.AgentMessage(error=apb.AgentError(code=code, message=text, request_id=request.request_id))
            )

        if request.device not in self._owned:
            refuse("unknown_device", f"device {request.device!r} is not served by agent {self.agent_id}")
            return
        # accepts still committing count too, so a burst cannot overfill the lane past the check
        waiting = self._dispatcher.queued(request.device) + self._accepting[request.device]
        lane_full = waiting >= self.settings.queue_limit
        if self.draining:
            refuse("queue_full", f"agent {self.agent_id} is shutting down")
            return
        if self._in_flight >= self._max_in_flight or lane_full:
            refuse(
                "queue_full", f"agent {self.agent_id} is full ({'device lane' if lane_full else 'in flight'})"
            )
            return
        self._in_flight += 1
        self._accepting[request.device] += 1
        task = asyncio.create_task(self._accept(request, out, refuse))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(
        self,
        request: pb.DeviceControllerRequest,
        out: asyncio.Queue[apb.AgentMessage | None],
        refuse: Callable[[str, str], None],
    ) -> None:
        try:
            # trace_id correlates the server's logs with ours across the stream
            with request_context(request.device, request.request_id, request.trace_id):
                await self._service.accept(request)  # returns once the journal committed it
        except InvalidRequestError as exc:
            refuse("invalid_request", str(exc))
        except JournalUnavailableError as exc:
            refuse("journal_unavailable", str(exc))
        else:
            out.put_nowait(apb.AgentMessage(request_ack=apb.RequestAck(request_id=request.request_id)))
        finally:
            self._in_flight -= 1
            self._accepting[request.device] -= 1
            if not self._accepting[request.device]:
                del self._accepting[request.device]


#: how a session ends that is worth a redial (anything else is a bug: raised, and supervised)
_SESSION_ENDINGS = (AgentRefusedError, grpc.aio.AioRpcError, OSError, ValueError)


class _HalfToFullJitter(tenacity.wait.wait_base):
    """A wait between half and all of what `inner` says."""

    def __init__(self, inner: tenacity.wait.wait_base) -> None:
        self._inner = inner

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return float(self._inner(retry_state)) * random.uniform(0.5, 1.0)
