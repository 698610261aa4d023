"""The HTTP endpoint: `/metrics` (every metric on the default registry plus the live state the
`StateCollector` reads when scraped: queue depth, outbox backlog, table sizes, shards), `/healthz`
and `/readyz` (the journal commits, the database answers, the process is not stopping)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.process.workers import accepts
from controller.store import outbox_backlog, table_rows

if TYPE_CHECKING:
    from controller.cluster.shards import Shards
    from controller.config import Settings
    from controller.plugin_host.host import PluginHost
    from controller.process.reports import Report
    from controller.store import Store

log = logging.getLogger(__name__)


class _Lanes(Protocol):
    @property
    def waiting(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def active_lanes(self) -> int: ...


class _Destination(Protocol):
    @property
    def failing(self) -> bool: ...


class _Delivery(Protocol):
    @property
    def destination(self) -> _Destination: ...


def receiver_up(c: ServedController) -> bool:
    """The callback as this process delivers to it; a `--workers` front end delivers nothing, so
    it is up only while every executor reports it up (controller/process/reports.py)."""
    executors = c.executor_reports()
    if executors is not None:
        return bool(executors) and all(r.callback_ok for r in executors)
    return not c.delivery.destination.failing


class ServedController(Protocol):
    """What the endpoint reads from the controller it serves (`controller.app.Controller`): a
    Protocol, because `controller.app` builds the endpoint and must not be imported back (no
    import circle, type-only ones included; tests/test_layering.py)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Store: ...
    @property
    def dispatcher(self) -> _Lanes: ...
    @property
    def shards(self) -> Shards: ...
    @property
    def delivery(self) -> _Delivery: ...
    @property
    def plugins(self) -> PluginHost: ...
    @property
    def journal_failure(self) -> str: ...
    @property
    def stopping(self) -> bool: ...
    def executor_reports(self) -> list[Report] | None: ...


class StateCollector(Collector):
    """Gauges read from the served controller when scraped; database figures come from the last
    `refresh()` (done by the /metrics handler before it renders).

    Database-wide figures (outbox backlog and its age, dead letters, table rows) are the same
    whichever process reads them: only a process that accepts requests (a front end, or a single
    process) exports them, so `serve --workers N` exports them once, not N + 1 times, and each of
    several pods exports the same value, which dashboards and alerts read with `max`
    (docs/operations.md, "Metrics")."""

    def __init__(self, controller: ServedController) -> None:
        self._controller = controller
        self.database_wide = accepts(controller.settings)
        self.backlog = 0
        self.oldest_age = 0.0
        self.dead_letters = 0
        self.rows: dict[str, int] = {}
        self.database_up = True
        self._rows_at = 0.0

    async def refresh(self, rows_every: float = 30.0) -> None:
        store = self._controller.store
        try:
            if not self.database_wide:  # an executor: whether the database answers, nothing more
                await store.dead_letter_count()
                self.database_up = True
                return
            backlog = await outbox_backlog(store)
            self.backlog, self.oldest_age = backlog.count, backlog.oldest_age(datetime.now(UTC))
            self.dead_letters = await store.dead_letter_count()
            if time.monotonic() - self._rows_at >= rows_every:  # count(*) of big tables: not per scrape
                self.rows = await table_rows(store)
                self._rows_at = time.monotonic()
            self.database_up = True
        except Exception as exc:
            self.database_up = False
            log.debug("metrics: database figures unavailable: %s", exc)

    def collect(self) -> Iterator[Any]:
        c = self._controller
        yield GaugeMetricFamily(
            "devicectl_queue_depth", "Requests waiting on device lanes", c.dispatcher.waiting
        )
        yield GaugeMetricFamily("devicectl_in_flight", "Requests running now", c.dispatcher.running)
        yield GaugeMetricFamily(
            "devicectl_lanes_active", "Devices with queued or running work", c.dispatcher.active_lanes
        )
        yield GaugeMetricFamily(
            "devicectl_shards_held",
            "Shards whose requests this process runs now (controller/cluster/shards.py)",
            len(c.shards.runnable()),
        )
        if self.database_wide:
            yield from self._database_wide()
        yield GaugeMetricFamily(
            "devicectl_database_up",
            "1 when the database answered the last scrape's queries",
            int(self.database_up),
        )
        yield GaugeMetricFamily(
            "devicectl_journal_up", "1 while the request journal commits", int(c.store.write_failure is None)
        )
        yield GaugeMetricFamily(
            "devicectl_delivery_receiver_up",
            "0 while the topology callback is down (a --workers front end: as any of its executors sees it)",
            int(receiver_up(c)),
        )
        restarts = CounterMetricFamily(
            "devicectl_plugin_restarts", "Out-of-process plugin restarts", labels=["plugin"]
        )
        for name, plugin in sorted(c.plugins.started().items()):
            if hasattr(plugin, "restarts"):
                restarts.add_metric([name], int(plugin.restarts))
        yield restarts

    def _database_wide(self) -> Iterator[Any]:
        yield GaugeMetricFamily("devicectl_outbox_backlog", "Responses awaiting delivery", self.backlog)
        yield GaugeMetricFamily(
            "devicectl_outbox_oldest_age_seconds", "Age of the oldest undelivered response", self.oldest_age
        )
        yield GaugeMetricFamily(
            "devicectl_dead_letters", "Responses given up on (dead-lettered)", self.dead_letters
        )
        rows = GaugeMetricFamily("devicectl_table_rows", "Rows per table (retention)", labels=["table"])
        for table, count in sorted(self.rows.items()):
            rows.add_metric([table], count)
        yield rows


# ---- the HTTP endpoint --------------------------------------------------------------------------


class MetricsServer:
    """`/metrics`, `/healthz` and `/readyz` on `metrics_listen`.

    The probes do not cascade (docs/operations.md, "Probes"): `/healthz` (liveness, and the
    startup probe) says the process works, so it depends on nothing outside it: a database or
    topology outage must not restart every pod, which would only add cold starts to the outage.
    `/readyz` says this process can accept a request now: it is serving, not shutting down, and
    its journal commits (an ack is a commit). A delivery backlog does not make a pod unready:
    every pod shares the one topology service, so its outage would empty the Service; the
    backlog is a metric to alert on (`devicectl_outbox_oldest_age_seconds`)."""

    def __init__(self, controller: ServedController) -> None:
        self._controller = controller
        self.collector = StateCollector(controller)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, listen: str) -> int:
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics_listen must be HOST:PORT, got {listen!r}")
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port))
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else int(port)
        # one controller per process exports its live gauges: a second one (tests) replaces it
        global _ACTIVE
        if _ACTIVE is not None:
            _unregister(_ACTIVE)
        REGISTRY.register(self.collector)
        _ACTIVE = self.collector
        return self.port

    async def stop(self) -> None:
        global _ACTIVE
        if _ACTIVE is self.collector:
            _unregister(self.collector)
            _ACTIVE = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _: web.Request) -> web.Response:
        await self.collector.refresh()
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def ready_problems(self) -> list[str]:
        """Why this process cannot accept a request now."""
        c = self._controller
        problems = []
        if c.stopping:
            problems.append("shutting down")
        if c.journal_failure:
            problems.append(f"request journal cannot commit: {c.journal_failure}")
        else:
            try:  # an ack is a commit: a database that does not answer accepts nothing
                await asyncio.wait_for(c.store.undelivered_count(), READY_DATABASE_TIMEOUT)
            except Exception as exc:
                problems.append(f"database unreachable: {type(exc).__name__}: {str(exc)[:200]}")
        return problems

    async def _healthz(self, _: web.Request) -> web.Response:
        # alive is answering: a wedged event loop does not answer, and the probe's timeout fails
        return _answer([])

    async def _readyz(self, _: web.Request) -> web.Response:
        return _answer(await self.ready_problems())


#: seconds /readyz waits for the database (below the chart's probe timeout)
READY_DATABASE_TIMEOUT = 2.0

_ACTIVE: StateCollector | None = None


def _unregister(collector: StateCollector) -> None:
    try:
        REGISTRY.unregister(collector)
    except KeyError:
        pass


def _answer(problems: list[str]) -> web.Response:
    if problems:
        return web.Response(status=503, text="\n".join(problems) + "\n")
    return web.Response(text="ok\n")
