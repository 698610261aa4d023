"""gRPC health of a controller process: SERVING while the request journal commits, NOT_SERVING
while it cannot (acks would fail), SERVING again after, and NOT_SERVING once it stops. That is
readiness (the process can accept); the service `liveness` is SERVING from start to stop whatever
the journal does (and while the process drains at a stop: a kill then would cut the drain short),
for a liveness or startup probe that must not restart every pod during a database outage
(docs/operations.md, "Probes").

Any failed write marks the journal down; while it is down a tiny write (the process's liveness
heartbeat) probes it with backoff, so it comes back without waiting for traffic. A write waiting
longer than `journal_stall_seconds` (a lock held elsewhere: writes hang, nothing fails) marks it
down too, until the waiting writes commit; no probe is queued behind them.
"""

from __future__ import annotations

import asyncio
import logging

from grpc_health.v1 import health, health_pb2

from controller._proto.devicecontroller.v1 import admin_pb2, devicecontroller_pb2
from controller.api.front_door import on_loop
from controller.config import Settings
from controller.process import workers
from controller.process.supervise import Outage
from controller.store import Store

log = logging.getLogger(__name__)

#: the health service a liveness or startup probe asks: SERVING while the process runs
LIVENESS = "liveness"

SERVICE_NAMES = (
    devicecontroller_pb2.DESCRIPTOR.services_by_name["DeviceController"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["DeviceControllerAdmin"].full_name,
)


class JournalHealth:
    """The health servicer and the loop that follows the journal (see the module docstring)."""

    def __init__(self, store: Store, settings: Settings, role: str) -> None:
        self._store = store
        self._settings = settings
        self._role = role
        self.servicer = health.aio.HealthServicer()
        #: the loop the gRPC server (and so the servicer's watchers) runs on; None: the caller's
        self.servicer_loop: asyncio.AbstractEventLoop | None = None
        #: set when the process stops: the loop ends and leaves NOT_SERVING in place
        self.stopped = False

    @property
    def names(self) -> tuple[str, ...]:
        """The services whose health is reported: an executor serves no DeviceController."""
        return ("", *SERVICE_NAMES) if workers.accepts(self._settings) else ("", SERVICE_NAMES[1])

    async def set(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self.names:
            await self._set(name, status)

    async def set_live(self) -> None:
        """`liveness`: SERVING from the start of the server until it closes."""
        await self._set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)

    async def _set(self, name: str, status: int) -> None:
        loop = self.servicer_loop
        if loop is None or loop.is_closed():
            await self.servicer.set(name, status)
        else:
            await on_loop(loop, self.servicer.set(name, status))

    def journal_failure(self) -> str:
        """Why the journal cannot commit ("" when it can)."""
        failure = self._store.write_failure
        return failure.reason if failure is not None else ""

    async def run(self) -> None:
        serving = True
        outage = Outage("request journal", log, cap=5.0)
        while not self.stopped:
            failure = self._store.write_failure
            if failure is not None:
                # NOTE: NOT_SERVING before the probe: it waits behind every write queued before it,
                # each as long as the database makes it (a lock: SQLite's busy timeout apiece), so
                # a first failure that came without a stall left the process SERVING that long
                serving = await self._publish(serving, False)
                if not failure.stalled:
                    try:
                        await self._store.heartbeat(self._settings.instance_id, self._role)
                    except Exception as exc:
                        outage.failed(exc)
            up = self._store.write_failure is None
            if up:
                outage.ok()
            serving = await self._publish(serving, up)
            await asyncio.sleep(self._settings.health_interval if up else outage.delay())

    async def _publish(self, serving: bool, up: bool) -> bool:
        """Report `up` where it differs from `serving` (not once stopped); what is reported now."""
        if up == serving or self.stopped:
            return serving
        if not up:
            log.error("health NOT_SERVING: the request journal cannot commit (%s)", self.journal_failure())
        else:
            log.warning("health SERVING: the request journal commits again")
        await self.set(up)
        return up
