"""Assembles the controller process: store, plugins, dispatcher, delivery, verifier and the gRPC
server (DeviceController, admin, health, reflection), with recovery at start and a graceful stop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import grpc
import tenacity
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller._proto.devicecontroller.v1 import (
    admin_pb2_grpc,
    devicecontroller_pb2_grpc,
)
from controller.api.admin import AdminService, Watchers
from controller.api.decode import DecodeGuard
from controller.api.front_door import FrontDoor, OnLoop
from controller.api.service import DeviceControllerService
from controller.cluster.claims import Claims
from controller.cluster.shards import ShardLeases, Shards
from controller.config import Settings
from controller.delivery import agent
from controller.delivery.outbox import Delivery
from controller.desired.drift import DriftChecker
from controller.desired.dryrun import Planner
from controller.execution.dispatch import Dispatcher
from controller.execution.runner import RequestRunner
from controller.execution.verifier import Verifier
from controller.execution.warmup import Warmup
from controller.inventory import (
    DeviceEntry,
    InventoryError,
    check_inventory,
    inventory_secrets,
    load_inventory,
    plugin_registry,
)
from controller.observability import metrics
from controller.observability.health import SERVICE_NAMES, JournalHealth
from controller.plugin_host.host import PluginHost
from controller.plugin_host.launch import load_external_plugins
from controller.process import reports, workers
from controller.process.retention import prune_forever
from controller.process.supervise import describe, supervise
from controller.process.writer import WriterLock
from controller.security import authz, tls
from controller.store import DeviceUpsert, Store, newer_schema_message
from controller.verify.checker import BmcChecker

if TYPE_CHECKING:
    from controller.observability.endpoint import MetricsServer

log = logging.getLogger(__name__)

#: seconds a stop waits for the restores of write-cycle journals under way to end, then again for
#: them to unwind once their calls are cut (`WriteCycles.stop`), before it hands the shards back
RESTORES_AT_STOP = 5.0


class SchemaOutdatedError(RuntimeError):
    """The database schema is older than the code; the message says which command to run."""


class Controller:
    """One controller process. `await start()`, then `await stop()`."""

    def __init__(self, settings: Settings, inventory: Mapping[str, DeviceEntry] | None = None) -> None:
        self.settings = settings
        self.inventory = (
            dict(inventory)
            if inventory is not None
            else (load_inventory(settings.inventory) if settings.inventory else {})
        )
        self.store = Store.from_url(settings.database_url)
        #: one writer per BMC: the database (SQLite) and the instance id (any) are this process's
        self.writer = WriterLock(settings.database_url, settings.instance_id)
        self.store.stall_after = settings.journal_stall_seconds or None
        # out-of-process plugins are declared in the inventory file ([[plugin]] tables)
        self.plugins = PluginHost(
            load_external_plugins(settings.inventory) if settings.inventory else {},
            client_id=settings.instance_id,
        )
        self.watchers = Watchers()
        self.secrets = inventory_secrets(settings, self.inventory)
        self.shards = self._shards()
        # agent mode (controller/delivery/agent.py): the agent's devices answer over its stream
        on_agent = agent.device_filter(settings.agent_devices) if settings.agent_server else None
        self.delivery = Delivery(
            self.store,
            settings.callback,
            concurrency=settings.delivery_concurrency,
            max_backoff=settings.delivery_max_backoff,
            probe_max=settings.delivery_probe_max_interval,
            timeout=settings.delivery_timeout,
            tls=tls.callback_tls(settings),
            owns=(lambda device: not on_agent(device)) if on_agent else None,
            shards=self.shards.serving,
        )
        self.agent_transport = agent.AgentTransport()
        self.agent_delivery: Delivery | None = None
        if on_agent is not None:
            self.agent_delivery = Delivery(
                self.store,
                f"agent stream {settings.agent_server}",
                concurrency=settings.delivery_concurrency,
                max_backoff=settings.delivery_max_backoff,
                probe_max=settings.delivery_probe_max_interval,
                timeout=settings.delivery_timeout,
                transport=self.agent_transport,
                owns=on_agent,
                shards=self.shards.serving,
            )
        self.runner = RequestRunner(
            self.store,
            self.plugins,
            settings,
            self.inventory,
            self.secrets,
            on_complete=self._completed,
            shards=self.shards,
        )
        self.dispatcher = Dispatcher(
            self.runner.run,
            max_concurrency=settings.max_concurrency,
            queue_limit=settings.queue_limit,
            on_superseded=self.runner.supersede,
        )
        self.claims = Claims(
            self.store, settings, self.dispatcher, self.runner, self.shards, workers.process_role(settings)
        )
        self.service = DeviceControllerService(
            self.store, self.dispatcher, settings, self.runner.reject, self.shards
        )
        self.agent: agent.Agent | None = None
        if self.agent_delivery is not None and on_agent is not None:
            self.agent = agent.Agent(
                settings,
                self.service,
                self.dispatcher,
                sorted(d for d in self.inventory if on_agent(d)),
                self.agent_transport,
                on_connect=self.agent_delivery.retry_now,
            )
        # role gating (controller/process/workers.py): a front end journals and acks, an executor runs
        self.role = workers.process_role(settings)
        self.executes = workers.executes(settings)
        self.executors: workers.ExecutorPool | None = None
        self.warmup: Warmup | None = None
        self.health = JournalHealth(self.store, settings, self.role)
        self._server: grpc.aio.Server | None = None
        #: the gRPC server's own thread and event loop (controller/api/front_door.py)
        self.front_door = FrontDoor()
        self._tasks: list[asyncio.Task[None]] = []
        self.port = 0
        self._stopped = False
        metrics.configure(settings.metrics_per_device, settings.metrics_max_devices)
        metrics.SHADOW_MODE.set(1 if settings.shadow else 0)
        if settings.shadow:
            log.warning("shadow mode: requests are planned, recorded and answered; no device write is sent")
        self.metrics_server: MetricsServer | None = None

    def _shards(self) -> Shards:
        """Which shards this process runs (controller/cluster/shards.py): none in a front end, all of them
        on SQLite (one process), a fair share of leases among the executors on PostgreSQL."""
        if not workers.executes(self.settings):
            return Shards(self.inventory, self.settings.shard_count, executes=False)
        if self.store.dialect != "postgresql":
            return Shards(self.inventory, self.settings.shard_count)
        return ShardLeases(
            self.store,
            self.settings,
            self.inventory,
            on_gained=self._shards_gained,
            busy=self._shard_busy,
            on_handed_on=self._shards_handed_on,
        )

    async def _shards_gained(self, shards: frozenset[int]) -> None:
        """Shards leased here in a lease round: claim their journaled requests, then warm their
        devices (a rebalancing after the start moves half the shards of the first executor up)."""
        try:
            await self.claims.gained(shards)
        finally:
            if self.warmup is not None:
                self.warmup.gained(shards)

    def _shards_handed_on(self, shards: frozenset[int]) -> None:
        """Shards a lease round handed on to another process: let go of their devices (their BMC
        sessions are logged out; the new holder logs in with its own)."""
        if self.warmup is not None:
            self.warmup.handed_on(shards)

    def _completed(self, request_id: str) -> None:
        self.watchers.notify(request_id)
        self.delivery.notify()
        if self.agent_delivery is not None:
            self.agent_delivery.notify()

    def _status_delivery(self) -> Delivery:
        """The destination `devicectl status` reports: the callback, or in agent mode without one
        the agent stream."""
        if self.agent_delivery is not None and not self.settings.callback:
            return self.agent_delivery
        return self.delivery

    def check_schema(self) -> None:
        status = self.store.schema_status()
        if status.up_to_date:
            return
        if status.newer:  # a rollback of the binary: upgrading cannot help, nor can --auto-upgrade
            raise SchemaOutdatedError(newer_schema_message(status))
        if self.settings.auto_upgrade:
            log.info("upgrading database schema %s -> %s", status.current, status.head)
            self.store.upgrade()
            return
        raise SchemaOutdatedError(
            f"database schema is at {status.current or 'empty'} but this devicectl needs {status.head}: run "
            f"`devicectl db upgrade --database-url {self.store.url_for_display}` "
            "(or start with --auto-upgrade)"
        )

    async def start(self, before_accepting: Callable[[], None] | None = None) -> int:
        """Start serving; returns the bound port. Unfinished journaled work is queued first.

        `before_accepting` is called once, just before the gRPC server starts taking calls: from
        then on a caller sees this process serving, so `serve` installs its SIGTERM and SIGINT
        handlers there (a signal that arrives during the rest of the start then stops it
        gracefully once started, instead of killing a process that already acknowledges)."""
        tls.check_settings(self.settings)  # bad security settings fail before anything starts
        workers.check_process_model(self.settings, self.store.dialect)
        workers.follow_supervisor()
        workers.lower_priority(self.settings.executor_niceness)
        self.writer.acquire()  # before anything reads or writes the journal
        try:
            return await self._start(before_accepting)
        except BaseException:
            await self._close_front_door()
            self.writer.release()
            raise

    async def _close_front_door(self) -> None:
        """Stop the gRPC server at once (if it started) and the front door's thread."""
        server, self._server = self._server, None
        try:
            if server is not None:
                await self.front_door.call(server.stop(0))
        finally:
            await self.front_door.stop()

    async def _start(self, before_accepting: Callable[[], None] | None) -> int:
        # the decode guard is innermost: a caller without the role is refused before decoding matters
        interceptors = [*authz.server_interceptors(self.settings), DecodeGuard()]
        problems = check_inventory(
            self.inventory, plugin_registry(self.inventory, self.settings.default_plugin), self.secrets
        )
        if problems:
            raise InventoryError("the inventory cannot be served:\n  " + "\n  ".join(problems))
        self.check_schema()
        await self.store.start()
        await self.store.sync_inventory(
            [
                DeviceUpsert(id=e.id, plugin=e.plugin, model_json=dict(e.model))
                for e in self.inventory.values()
            ]
        )
        if self.executes:
            if isinstance(self.shards, ShardLeases):
                await self.shards.round()  # our first leases (and their requests) before serving
            await self.recover()
        if self.settings.metrics_listen:  # before gRPC: a port in use fails the start cleanly
            from controller.observability import endpoint  # aiohttp.web only where served

            self.metrics_server = endpoint.MetricsServer(self)
            port = await self.metrics_server.start(self.settings.metrics_listen)
            log.info("metrics on http://%s:%d/metrics", self.settings.metrics_listen.rpartition(":")[0], port)
        # the gRPC server on a thread and loop of its own: acks never wait for a wave's backlog
        # (controller/api/front_door.py); accepted requests and the admin API run on this loop
        execution = asyncio.get_running_loop()
        self.service.execute_on(execution)
        if before_accepting is not None:
            before_accepting()
        self.front_door.start()
        self.health.servicer_loop = self.front_door.loop
        self._server, self.port = await self.front_door.call(self._serve(interceptors, execution))
        await self.health.set(serving=True)
        await self.health.set_live()
        self._tasks = [asyncio.create_task(supervise("health", self.health.run), name="health")]
        if self.writer.watched:  # PostgreSQL: its lock lives on a connection that may be lost
            self._tasks.append(asyncio.create_task(supervise("writer", self.writer.watch), name="writer"))
        if self.executes:
            self._start_execution()
        if self.settings.retention_interval > 0 and self.role != "executor":  # one per deployment
            prune = functools.partial(prune_forever, self.store, self.settings, lambda: self._stopped)
            self._tasks.append(asyncio.create_task(supervise("retention", prune), name="retention"))
        if self.settings.workers > 0:
            self.executors = workers.ExecutorPool(self.settings)
            await self.executors.start()
        # per-device gauges from the database: every device's last known health, verification and
        # limits, not only what this process will change
        await metrics.load_from_database(self.store, self.inventory)
        log.info(
            "serving on %s (port %d, role %s), database %s, callback %s, %d devices in inventory",
            self.settings.listen,
            self.port,
            self.role,
            self.store.url_for_display,
            self.settings.callback or "-",
            len(self.inventory),
        )
        return self.port

    async def _serve(
        self, interceptors: list[grpc.aio.ServerInterceptor], execution: asyncio.AbstractEventLoop
    ) -> tuple[grpc.aio.Server, int]:
        """Build, bind and start the gRPC server on the running loop (the front door's)."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=interceptors)
        if workers.accepts(self.settings):
            devicecontroller_pb2_grpc.add_DeviceControllerServicer_to_server(self.service, server)
        admin = AdminService(
            self.store,
            self.dispatcher,
            self.inventory,
            self.watchers,
            self._status_delivery(),
            dry_run=Planner(self.runner, self.settings).plan,
            executor_reports=self.executor_reports,
            shadow=self.settings.shadow,
            warmup=lambda: self.warmup.progress if self.warmup is not None else None,
        )
        admin_pb2_grpc.add_DeviceControllerAdminServicer_to_server(OnLoop(admin, execution), server)  # type: ignore[arg-type]
        health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, server)
        if self.settings.reflection:
            reflection.enable_server_reflection(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        port = await self._bind(server)
        await server.start()
        return server, port

    def executor_reports(self) -> list[reports.Report] | None:
        """A `--workers` front end: what its executors last reported (None in any other process)."""
        return self.executors.reports.current() if self.executors is not None else None

    def _start_execution(self) -> None:
        """The background work of a process that runs requests (roles all and executor)."""
        verifier = Verifier(self.store, self.runner)
        if self.role == "executor":  # to its front end, when one started it (`serve --workers`)
            snapshot = functools.partial(reports.snapshot, self.settings.instance_id, self._status_delivery())
            self._tasks.append(asyncio.create_task(reports.report_forever(snapshot), name="reports"))
        self.checker = BmcChecker(self.store, self.runner, self.dispatcher, self.settings, self.inventory)
        self._tasks += [
            asyncio.create_task(supervise("readiness checks", self.checker.run), name="readiness checks"),
            asyncio.create_task(supervise("delivery", self.delivery.run), name="delivery"),
            asyncio.create_task(supervise("verifier", verifier.run), name="verifier"),
            asyncio.create_task(supervise("lease", self.claims.sweep), name="lease"),
        ]
        if isinstance(self.shards, ShardLeases):
            self._tasks += [
                asyncio.create_task(supervise("shard leases", self.shards.run), name="shard leases"),
                asyncio.create_task(supervise("claim", self.claims.poll), name="claim"),
            ]
        if self.agent is not None and self.agent_delivery is not None:
            self._tasks += [
                asyncio.create_task(
                    supervise("agent delivery", self.agent_delivery.run), name="agent delivery"
                ),
                asyncio.create_task(supervise("agent", self.agent.run), name="agent"),
            ]
        self.warmup = Warmup(self.runner, self.dispatcher, self.settings)
        self.warmup.start(list(self.inventory))  # runs once, apart from the loops above
        if self.settings.drift_interval > 0:
            self.drift = DriftChecker(
                self.store, self.runner, self.dispatcher, self.settings, inventory=self.inventory
            )
            self._tasks.append(asyncio.create_task(supervise("drift", self.drift.run), name="drift"))

    async def _bind(self, server: grpc.aio.Server) -> int:
        # NOTE: right after a crash the old process's port can linger for a moment: grpc refuses
        # the address (RuntimeError); the policy tries again every 0.25 s, 20 tries in all (5 s)
        try:
            async for attempt in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception_type(RuntimeError),
                wait=tenacity.wait_fixed(0.25),
                stop=tenacity.stop_after_attempt(20),
                reraise=True,
            ):
                with attempt:
                    return tls.add_port(
                        server,
                        self.settings.listen,
                        tls.server_tls(self.settings),
                        insecure=self.settings.insecure,
                        what="listen address",
                    )
        except RuntimeError:
            pass
        raise OSError(f"cannot listen on {self.settings.listen}: address in use or invalid")

    async def recover(self) -> int:
        """Restore the write cycles a crash left unfinished (of the devices whose shards this
        process runs: before any of their requests is queued), then queue journaled requests that
        never finished (controller/cluster/claims.py)."""
        shards = self.runner.shards
        try:  # with shard leases, the first round's gained shards did (claims.py: apart from it)
            if not shards.leased:
                await self.runner.write_cycles.recover(lambda d: shards.runs(shards.shard_for(d)))
        except Exception as exc:  # the journals stay open: each node's next cycle restores it first
            log.error("unfinished write cycles could not be restored at the start: %s", describe(exc))
        return await self.claims.recover()

    def _shard_busy(self, shard: int) -> bool:
        """Whether a request of the shard runs or a response of it is being delivered here."""
        deliveries = [self.delivery, *([self.agent_delivery] if self.agent_delivery else [])]
        return bool(self.runner.running_shards.get(shard)) or any(
            d.in_flight_shards.get(shard) for d in deliveries
        )

    async def _release_shards(self, grace: float) -> None:
        """At a clean stop: hand every shard lease back, so peers take them over at once."""
        if not isinstance(self.shards, ShardLeases):
            return
        try:
            await self.shards.release_all(timeout=grace)
        except Exception as exc:  # they expire on their own after lease_ttl
            log.warning("shutdown: shard leases not released (%s); they expire after lease_ttl", exc)

    @property
    def stopping(self) -> bool:
        return self._stopped

    @property
    def journal_failure(self) -> str:
        """Why the journal cannot commit ("" when it can)."""
        return self.health.journal_failure()

    async def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let in-flight work finish (or stay journaled), flush deliveries."""
        if self._stopped:
            return
        self._stopped = self.health.stopped = True
        grace = self.settings.shutdown_grace if grace is None else grace
        # the executors stop (each gracefully) while this front end does
        executors = asyncio.ensure_future(self.executors.stop()) if self.executors is not None else None
        if self.agent is not None:
            self.agent.draining = True  # like the server below: no new work, responses still flow
        if self._server is not None:
            await self.health.set(serving=False)
            await self.front_door.call(self._server.stop(grace))
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if not await self.dispatcher.drain(grace):
            log.warning(
                "shutdown: work still running after %.1f s stays journaled and runs after restart", grace
            )
            await self.dispatcher.cancel()
        if self.executes:
            await self.delivery.flush(timeout=min(grace, 5.0))
        self.delivery.stop()
        if self.agent_delivery is not None:
            await self.agent_delivery.flush(timeout=min(grace, 5.0))
            self.agent_delivery.stop()
        if self.warmup is not None:
            self.warmup.stop()
        for task in self._tasks:
            task.cancel()
        restores = self.claims.stop_restores()  # a restore under way ends its step first (uncancelled)
        # Bounded: a background loop that missed its cancellation must not hang the shutdown.
        _, stuck = await asyncio.wait([*self._tasks, *restores], timeout=RESTORES_AT_STOP)
        # a restore still writing when the leases go would write the node beside its next holder:
        # none starts from now on, and the calls of those still running are cut (their journals
        # stay open, for that holder or the next start)
        self.runner.write_cycles.stop()
        if stuck:
            _, stuck = await asyncio.wait(stuck, timeout=RESTORES_AT_STOP)
        for task in stuck:
            log.error("shutdown: background task %s did not stop", task.get_name())
        await self._release_shards(min(grace, 5.0))
        if executors is not None:
            await executors
        # Bounded, so a stuck BMC logout or database cannot hang the shutdown.
        for step, timeout in ((self.plugins.close(), 10.0), (self.store.close(), 30.0)):
            try:
                await asyncio.wait_for(step, timeout)
            except TimeoutError:
                log.error("shutdown: a step did not finish within %.0f s", timeout)
        await self.front_door.stop()
        self.writer.release()
        log.info("stopped at %s", datetime.now(UTC).isoformat())
