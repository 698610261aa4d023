"""A small TopologyCallback receiver: prints and records every response it gets.

For local use, the demo and tests. It counts receipts per request_id, so duplicates are visible,
and appends each response as one JSON line to a record file when asked. It serves TLS, or mutual
TLS when given a client CA (then it records which certificate delivered), like a real receiver.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import grpc
from google.protobuf import empty_pb2, json_format

from controller._proto.devicecontroller.v1 import agent_pb2_grpc as agrpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from controller._proto.devicecontroller.v1 import topology_callback_pb2_grpc as cb
from controller.delivery.agent_server import AgentHub
from controller.security.tls import ServerTls, add_port

log = logging.getLogger(__name__)


class TopologySink(cb.TopologyCallbackServicer):
    """Receives DeviceControllerResponse messages on `listen` (port 0 picks a free one)."""

    def __init__(
        self,
        listen: str = "127.0.0.1:50052",
        record: str | Path | None = None,
        on_response: Callable[[pb.DeviceControllerResponse], None] | None = None,
        *,
        tls: ServerTls | None = None,
        insecure: bool = False,
        routes: dict[str, str] | None = None,
    ) -> None:
        self.listen = listen
        self.tls = tls or ServerTls()
        self.insecure = insecure
        self.peers: Counter[str] = Counter()  # verified client-certificate CNs (mutual TLS)
        self.record = Path(record) if record else None
        self.on_response = on_response
        self.responses: list[pb.DeviceControllerResponse] = []
        self.counts: Counter[str] = Counter()
        self.available = True  # tests flip this to simulate an outage
        self._server: grpc.aio.Server | None = None
        #: the agent side (AgentService, AgentAdmin, DeviceController routed to agents)
        self.agents = AgentHub(self.receive, mutual_tls=self.tls.mutual, routes=routes)
        self._arrived = asyncio.Condition()
        self.port = 0

    async def DeviceResponse(
        self, request: pb.DeviceControllerResponse, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        if not self.available:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "topology service unavailable")
        names = [n.decode(errors="replace") for n in context.auth_context().get("x509_common_name", ())]
        await self.receive(request, names)
        return empty_pb2.Empty()

    async def receive(self, request: pb.DeviceControllerResponse, peers: list[str]) -> None:
        """Record one response (from the callback, or an agent's stream:
        controller/delivery/agent_server.py)."""
        self.counts[request.request_id] += 1
        for name in peers:
            self.peers[name] += 1
        self.responses.append(request)
        if self.record is not None:
            with self.record.open("a") as fh:
                fh.write(json.dumps(json_format.MessageToDict(request)) + "\n")
        if self.on_response is not None:
            self.on_response(request)
        async with self._arrived:
            self._arrived.notify_all()

    def unique(self) -> dict[str, pb.DeviceControllerResponse]:
        """The first response received for each request_id."""
        out: dict[str, pb.DeviceControllerResponse] = {}
        for response in self.responses:
            out.setdefault(response.request_id, response)
        return out

    async def wait_for(self, request_ids: set[str] | int, timeout: float = 10.0) -> None:
        """Wait until responses for all these request ids (or this many distinct ids) arrived."""

        def done() -> bool:
            if isinstance(request_ids, int):
                return len(self.counts) >= request_ids
            return request_ids <= set(self.counts)

        async with self._arrived:
            await asyncio.wait_for(self._arrived.wait_for(done), timeout)

    async def start(self) -> int:
        self._server = grpc.aio.server()
        cb.add_TopologyCallbackServicer_to_server(self, self._server)
        agrpc.add_AgentServiceServicer_to_server(self.agents, self._server)
        agrpc.add_AgentAdminServicer_to_server(self.agents, self._server)
        dgrpc.add_DeviceControllerServicer_to_server(self.agents, self._server)
        self.port = add_port(self._server, self.listen, self.tls, insecure=self.insecure, what="sink")
        if self.port == 0:
            raise OSError(f"cannot listen on {self.listen}")
        await self._server.start()
        return self.port

    @property
    def address(self) -> str:
        host = self.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(0.5)
            self._server = None
