"""``Store``: the asyncio facade over the synchronous SQLAlchemy code, one class for every table.

Each table's queries are functions in its own module (``_journal``, ``_devices``, ``_outbox``,
``_bmc_checks``, ``_write_cycles``, ``_bmc_health``, ...); a ``Store`` method checks its arguments
and runs one of them on the writer or a reader.

Writes go through the group-commit writer (one thread, see ``_batch``); reads run on a small
thread pool with their own connections. The event loop never waits on the database directly.

Delivery outcomes (delivered, failed, dead-lettered) never wait behind the other writes: the
receiver already has the response, and a crash before the outcome commits sends it again. On
PostgreSQL they have a writer and a connection of their own; on SQLite (one writer at a time for
the whole database) they go ahead of everything queued in the one writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.engine import URL, Connection

from . import (
    _bmc_checks,
    _bmc_health,
    _claims,
    _database,
    _desired,
    _devices,
    _fleet,
    _journal,
    _outbox,
    _shards,
    _verifications,
    _write_cycles,
)
from ._batch import STORE_LINGER, BatchWriter, Handler, WriteFailure
from ._bmc_checks import BmcCheckRow
from ._bmc_health import BmcAccess, BmcHealthRow
from ._coalesce import CoalescedReads
from ._fleet import FleetCounts
from ._shards import LeaseRound, LeaseRoundResult
from ._types import (
    Accepted,
    AuditView,
    Completion,
    DesiredLimit,
    DeviceUpsert,
    DeviceView,
    DriftCheck,
    DueHead,
    JournalRow,
    NewRequest,
    OutboxItem,
    RequestView,
    SchemaStatus,
    ShardLease,
    StoreStats,
    VerificationRow,
    require_aware,
)
from ._write_cycles import WriteCycleRow

T = TypeVar("T")


class Store:
    """Persistence for devicectl: journal, devices, outbox, audit log, verifications, leases.

    Create with :meth:`from_url`, check or apply the schema (:meth:`schema_status`,
    :meth:`upgrade`), then ``await start()`` and finally ``await close()``. All datetimes passed in
    must be timezone-aware; all datetimes returned are UTC.
    """

    def __init__(
        self,
        url: URL,
        *,
        batch_max: int = 512,
        sqlite_synchronous: str = "FULL",
        read_pool_size: int = _database.READ_POOL_SIZE,
    ) -> None:
        self._url = url
        self._sqlite_synchronous = sqlite_synchronous.upper()
        self._write_engine, self._read_engine = _database.create_engines(
            url, sqlite_synchronous=sqlite_synchronous, read_pool_size=read_pool_size
        )
        self._memory = _database.is_sqlite_memory(url)
        #: Group-commit counters (batches, transactions, ops, retries, failures).
        self.stats = StoreStats()
        self._writer = BatchWriter(
            self._write_engine,
            batch_max=batch_max,
            stats=self.stats,
            linger=STORE_LINGER,
            # a SQLite file's connection is kept between transactions; PostgreSQL's is checked
            # out (and pinged) for each, so a restarted server costs no failed transaction
            hold_connection=url.get_backend_name() == "sqlite" and not self._memory,
        )
        #: delivery outcomes' own engine and writer (PostgreSQL; None: the main writer, first)
        self._outcome_engine = _database.create_outcome_engine(url)
        self._outcomes = (
            BatchWriter(self._outcome_engine, batch_max=batch_max, stats=self.stats)
            if self._outcome_engine is not None
            else None
        )
        # A private in-memory SQLite database is one connection: reads must queue behind writes.
        self._read_pool = (
            self._writer.executor
            if self._memory
            else ThreadPoolExecutor(max_workers=read_pool_size, thread_name_prefix="devicectl-store-read")
        )
        self._closed = False
        self._device_reads: CoalescedReads[str, DeviceView] = CoalescedReads(self._read, _devices.get_devices)

    @classmethod
    def from_url(cls, url: str, *, batch_max: int = 512, sqlite_synchronous: str = "FULL") -> Store:
        """A store for ``sqlite:///PATH`` (parent directories are created) or ``postgresql://...``.

        ``postgresql://`` and ``postgres://`` URLs are served by psycopg 3. ``sqlite_synchronous``
        is SQLite's ``PRAGMA synchronous``: FULL (the default) makes every acknowledged write
        survive power loss; NORMAL in WAL mode may lose the last commits on power loss.
        """
        return cls(_database.normalise_url(url), batch_max=batch_max, sqlite_synchronous=sqlite_synchronous)

    # --- lifecycle and schema -------------------------------------------------------------------

    @property
    def url_for_display(self) -> str:
        """The database URL with the password masked."""
        return _database.display_url(self._url)

    @property
    def url(self) -> URL:
        """The database URL (with its password: never print it, `url_for_display` is for that)."""
        return self._url

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return str(self._url.get_backend_name())

    @property
    def keeps_state_text(self) -> bool:
        """Whether a device's state is stored as the JSON text a completion gives (SQLite), so a
        change against that text can be taken as given (``Completion.state_change``); PostgreSQL's
        JSONB keeps no text."""
        return self.dialect == "sqlite"

    def _with_migration_engine(self, fn: Callable[[Any], T]) -> T:
        if self._memory:
            return fn(self._write_engine)
        engine = _database.create_migration_engine(self._url, sqlite_synchronous=self._sqlite_synchronous)
        try:
            return fn(engine)
        finally:
            engine.dispose()

    def schema_status(self) -> SchemaStatus:
        """The database's schema revision against the head revision (synchronous)."""
        return self._with_migration_engine(_database.schema_status)

    def upgrade(self) -> None:
        """Apply pending migrations (synchronous; safe to run from several processes at once)."""
        self._with_migration_engine(_database.upgrade)

    def downgrade(self, revision: str) -> None:
        """Undo migrations down to `revision` (synchronous), for a rollback to an older release."""
        self._with_migration_engine(lambda engine: _database.downgrade(engine, revision))

    def ensure_schema(self, *, upgrade: bool = False) -> SchemaStatus:
        """Return the schema status if up to date; upgrade first when ``upgrade`` is set.

        Raises :class:`SchemaOutdatedError` (whose message names the command to run) otherwise.
        """
        status = self.schema_status()
        if status.up_to_date:
            return status
        if not upgrade:
            raise _database.SchemaOutdatedError(status, self.url_for_display)
        self.upgrade()
        return self.schema_status()

    async def start(self) -> None:
        """Open the writer's and a reader's connection now, so a bad URL fails at startup."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer.executor, _ping, self._write_engine)
        if self._outcomes is not None:
            await loop.run_in_executor(self._outcomes.executor, _ping, self._outcome_engine)
        if not self._memory:
            await loop.run_in_executor(self._read_pool, _ping, self._read_engine)

    async def close(self) -> None:
        """Finish every queued write, then release threads and connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._writer.close()
        if self._outcomes is not None:
            await self._outcomes.close()
        if self._outcome_engine is not None:
            self._outcome_engine.dispose()
        if self._read_pool is not self._writer.executor:
            await asyncio.get_running_loop().run_in_executor(None, self._read_pool.shutdown, True)
        self._write_engine.dispose()
        self._read_engine.dispose()

    # --- plumbing -----------------------------------------------------------------------------------

    async def _write(self, handler: Handler, arg: Any) -> Any:
        return await self._writer.submit(handler, arg)

    async def _write_outcome(self, handler: Handler, arg: Any) -> Any:
        """A delivery outcome: its own writer, or the main one ahead of its queue (module doc)."""
        if self._outcomes is not None:
            return await self._outcomes.submit(handler, arg)
        return await self._writer.submit(handler, arg, first=True)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._read_pool, self._run_read, fn, args)

    def _run_read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._read_engine.connect() as conn:
            return fn(conn, *args)

    # --- journal ------------------------------------------------------------------------------------

    async def accept(self, rows: Sequence[NewRequest]) -> list[Accepted]:
        """Journal requests durably; a request id already journaled is reported, not re-inserted."""
        if not rows:
            return []
        for row in rows:
            require_aware("accepted_at", row.accepted_at)
            require_aware("deadline_at", row.deadline_at)
        # ahead of what is queued (a wave's completions and state writes): an ack waits for the
        # next commit, not for the backlog of the work already acknowledged
        result: list[Accepted] = await self._writer.submit(_journal.accept_many, list(rows), first=True)
        return result

    async def accept_one(self, row: NewRequest) -> Accepted:
        """Journal one request; concurrent calls share a transaction (group commit)."""
        return (await self.accept([row]))[0]

    async def mark_running(self, request_id: str, at: datetime) -> None:
        """Record that the request started: status running, started_at, attempts + 1."""
        require_aware("at", at)
        await self._write(_journal.mark_running_many, (request_id, at))

    def mark_running_soon(self, request_id: str, at: datetime) -> asyncio.Future[None]:
        """``mark_running`` queued now, from synchronous code (a timer); resolves once committed.
        Raises StoreClosedError at once when the store is closed."""
        require_aware("at", at)
        return self._writer.submit(_journal.mark_running_many, (request_id, at))

    async def complete(self, c: Completion) -> bool:
        """Finish a request; the journal, device, state/audit, outbox and verification rows
        are written in one transaction. False (and no effect) if it was already completed.

        Raises LookupError for a request id that was never journaled.
        """
        require_aware("finished_at", c.finished_at)
        require_aware("started_at", c.started_at)
        if c.verification is not None:
            require_aware("verification.due_at", c.verification.due_at)
        result: bool = await self._write(_journal.complete_many, c)
        return result

    async def claim_unfinished(
        self, owner: str, lease_ttl: float, *, limit: int | None = None
    ) -> list[JournalRow]:
        """Take ownership of unfinished requests (queued or running) that are ``owner``'s or whose
        owner's lease is older than ``lease_ttl`` seconds (or absent); ordered by seq.

        On PostgreSQL rows being claimed by another controller at the same moment are skipped
        (``FOR UPDATE SKIP LOCKED``), so two claimers never get the same row.
        """
        result: list[JournalRow] = await self._write(_claims.claim_unfinished_many, (owner, lease_ttl, limit))
        return result

    async def heartbeat(self, owner: str, role: str = "all") -> None:
        """Renew ``owner``'s lease (database time on PostgreSQL); ``role`` tells executors (which
        share the shards) from front ends."""
        await self._write(_claims.heartbeat_many, (owner, role))

    # --- shard leases (controller/cluster/shards.py) -----------------------------------------------

    async def claim_shards(
        self, owner: str, shards: Sequence[int], *, others_only: bool = False, limit: int | None = None
    ) -> list[JournalRow]:
        """Take ownership of the unfinished requests of ``shards``, ordered by seq; with
        ``others_only``, only those another controller journaled or held. Rows being claimed
        elsewhere at the same moment are skipped (``FOR UPDATE SKIP LOCKED`` on PostgreSQL)."""
        result: list[JournalRow] = await self._write(
            _claims.claim_shards_many, (owner, sorted(shards), others_only, limit)
        )
        return result

    async def lease_round(self, r: LeaseRound) -> LeaseRoundResult:
        """Heartbeat, renew ``r.owner``'s shard leases and acquire free ones up to its fair share,
        in one transaction (database time)."""
        result: LeaseRoundResult = await self._write(_shards.lease_round_many, r)
        return result

    async def release_shards(self, owner: str, tokens: dict[int, int]) -> int:
        """Give up leases (``{shard: token}``) that are still ``owner``'s; how many were released."""
        result: int = await self._write(_shards.release_many, (owner, dict(tokens)))
        return result

    async def forget_controller(self, owner: str) -> None:
        """Drop ``owner``'s liveness row (a clean stop), so its peers rebalance at once."""
        await self._write(_shards.forget_many, owner)

    async def shard_leases(self) -> list[ShardLease]:
        """Every shard lease, by shard."""
        return await self._read(_shards.list_leases)

    async def get_request(self, request_id: str) -> RequestView | None:
        """One request with its response and delivery state, or None."""
        return await self._read(_journal.get_request, request_id)

    async def list_requests(
        self,
        device: str | None = None,
        status: str | None = None,
        undelivered_only: bool = False,
        limit: int = 100,
        dead_letter_only: bool = False,
        outcome: str | None = None,
        kind: str | None = None,
        trace_id: str | None = None,
        before_seq: int | None = None,
        devices: Sequence[str] | None = None,
    ) -> list[RequestView]:
        """Requests, newest first; ``undelivered_only`` keeps those with a response not yet delivered,
        ``dead_letter_only`` those whose response the receiver refused for good, ``outcome`` those
        that finished so ("ok", "failed"), ``kind`` and ``trace_id`` those with that kind or trace;
        ``before_seq`` those journaled before that one (the next page), ``devices`` those devices'."""
        filters = (dead_letter_only, outcome, kind, trace_id, before_seq, devices)
        return await self._read(_journal.list_requests, device, status, undelivered_only, limit, *filters)

    # --- devices ------------------------------------------------------------------------------------

    async def sync_inventory(self, devices: Sequence[DeviceUpsert]) -> None:
        """Insert or update the listed devices (state kept); mark unlisted ones out of inventory."""
        await self._write(_devices.sync_inventory_many, list(devices))

    async def device_state(self, device_id: str) -> tuple[dict[str, Any] | None, int]:
        """The device's state JSON and state version; ``(None, 0)`` for an unknown device."""
        return await self._read(_devices.device_state, device_id)

    async def get_device(self, device_id: str) -> DeviceView | None:
        """One device, or None (concurrent calls share a query: `_coalesce`)."""
        return await self._device_reads.get(device_id)

    async def list_devices(
        self, limit: int = 1000, after: str = "", ids: Sequence[str] | None = None
    ) -> list[DeviceView]:
        """Devices ordered by id: those after `after` (the next page), of `ids` when given."""
        return await self._read(_devices.list_devices, limit, after, ids)

    async def list_audit(self, device: str | None = None, limit: int = 100) -> list[AuditView]:
        """State changes, newest first."""
        return await self._read(_devices.list_audit, device, limit)

    # --- desired state and drift (docs/desired-state.md) ------------------------------------------

    async def desired_for(self, device: str) -> list[DesiredLimit]:
        """The device's desired limits, by component."""
        return await self._read(_desired.desired_for, device)

    async def fleet_counts(self, devices: Sequence[str]) -> FleetCounts:
        """Of `devices`: how many drifted, are unreachable, were verified and were ever checked,
        counted in the database (`devicectl status`)."""
        return await self._read(_fleet.fleet_counts, list(devices))

    async def desired_for_devices(self, devices: Sequence[str]) -> dict[str, list[DesiredLimit]]:
        """The listed devices' desired limits, by device then component (one read)."""
        return await self._read(_desired.desired_for_devices, list(devices))

    async def devices_with_desired(self) -> list[str]:
        """Devices that have desired limits (the ones drift checks look at)."""
        return await self._read(_desired.devices_with_desired)

    async def request_ids_since(self, device: str, prefix: str, since: datetime) -> list[str]:
        """Ids of the device's journaled requests starting with `prefix`, accepted at `since` or later
        (re-applications counted across restarts and processes)."""
        require_aware("since", since)
        return await self._read(_desired.request_ids_since, device, prefix, since)

    async def record_drift_check(self, check: DriftCheck) -> None:
        """Store what a drift check found (and an audit row when something drifted)."""
        require_aware("at", check.at)
        await self._write(_desired.record_checks_many, check)

    @property
    def write_failure(self) -> WriteFailure | None:
        """Set while write transactions fail because the database is unreachable or locked, or
        while the oldest pending write has waited longer than ``stall_after`` for its commit."""
        if self._writer.failure is not None or self._outcomes is None:
            return self._writer.failure
        return self._outcomes.failure

    @property
    def stall_after(self) -> float | None:
        """Seconds a write may wait for its commit before ``write_failure`` reports a stall."""
        return self._writer.stall_after

    @stall_after.setter
    def stall_after(self, seconds: float | None) -> None:
        self._writer.stall_after = seconds
        if self._outcomes is not None:
            self._outcomes.stall_after = seconds

    # --- verifications ------------------------------------------------------------------------------

    async def due_verifications(
        self, now: datetime, limit: int = 100, shards: Sequence[int] | None = None
    ) -> list[VerificationRow]:
        """Pending verifications whose next check is due, soonest first; only those of requests
        in ``shards`` when given."""
        require_aware("now", now)
        return await self._read(_verifications.due_verifications, now, limit, shards)

    async def update_verification(
        self,
        verification_id: str,
        status: str,
        detail: str,
        due_at: datetime | None,
        checks: int,
        finished_at: datetime | None,
    ) -> None:
        """Record a check's result; ``due_at=None`` keeps the current due time."""
        require_aware("due_at", due_at)
        require_aware("finished_at", finished_at)
        await self._write(
            _verifications.update_many, (verification_id, status, detail, due_at, checks, finished_at)
        )

    async def list_verifications(
        self, device: str | None = None, verification_id: str | None = None, limit: int = 100, **page: Any
    ) -> list[VerificationRow]:
        """Verifications, newest first; `after=(created_at, id)` starts just after that row (a keyset
        page), `devices=[...]` keeps theirs."""
        where = (page.get("after"), page.get("devices"))
        return await self._read(_verifications.list_verifications, device, verification_id, limit, *where)

    # --- outbox: what the delivery worker sends (outcomes are written ahead of the rest) ---------------

    async def due_outbox(
        self, now: datetime, limit: int = 500, shards: Sequence[int] | None = None
    ) -> list[OutboxItem]:
        """For each device, its oldest undelivered response if that one is due (per-device order);
        only responses of ``shards`` when given."""
        require_aware("now", now)
        return await self._read(_outbox.due_outbox, now, limit, shards)

    async def due_heads(
        self,
        now: datetime,
        limit: int = 500,
        shards: Sequence[int] | None = None,
        devices: Collection[str] | None = None,
    ) -> list[DueHead]:
        """The rows ``due_outbox`` would return (of ``devices`` only, when given), without their
        contents, each with its device's count of undelivered rows."""
        require_aware("now", now)
        return await self._read(_outbox.due_heads, now, limit, shards, devices)

    async def outbox_items(self, ids: Sequence[int]) -> list[OutboxItem]:
        """The outbox rows ``ids`` still waiting for delivery, by id (a delivered one: nothing)."""
        return await self._read(_outbox.outbox_items, list(ids)) if ids else []

    async def next_outbox(self, device: str, after_id: int, limit: int) -> list[OutboxItem]:
        """The device's next ``limit`` undelivered responses after ``after_id``, by id."""
        return await self._read(_outbox.next_outbox, device, after_id, limit)

    async def mark_delivered(self, outbox_id: int, at: datetime) -> None:
        """Record a successful delivery."""
        require_aware("at", at)
        await self._write_outcome(_outbox.mark_delivered_many, (outbox_id, at))

    async def delivery_failed(self, outbox_id: int, error: str, next_attempt_at: datetime) -> None:
        """Record a failed delivery attempt and when to try again."""
        require_aware("next_attempt_at", next_attempt_at)
        await self._write_outcome(_outbox.delivery_failed_many, (outbox_id, error, next_attempt_at))

    async def dead_letter(self, outbox_id: int, error: str, at: datetime) -> None:
        """Give up on a response the receiver refused for good (never sent again)."""
        require_aware("at", at)
        await self._write_outcome(_outbox.dead_letter_many, (outbox_id, error, at))

    async def dead_letter_count(self) -> int:
        """How many responses were given up on."""
        return await self._read(_outbox.dead_letter_count)

    async def undelivered_count(self) -> int:
        """How many responses await delivery."""
        return await self._read(_outbox.undelivered_count)

    # --- readiness verifications (`devicectl verify`, `_bmc_checks`) -------------------------------

    async def add_bmc_checks(self, rows: Sequence[BmcCheckRow]) -> None:
        """Journal new verifications (status `queued`) in one transaction."""
        for r in rows:
            require_aware("created_at", r.created_at)
        await self._write(_bmc_checks.insert_many, list(rows))

    async def claim_bmc_checks(
        self, owner: str, limit: int, now: datetime, devices: Sequence[str] | None = None
    ) -> list[BmcCheckRow]:
        """Take up to `limit` queued verifications, oldest first, for `owner` (of `devices` only:
        the devices whose shard lease `owner` holds, so one process holds a node cluster-wide)."""
        require_aware("now", now)
        rows: list[BmcCheckRow] = await self._write(_bmc_checks.claim_many, (owner, limit, now, devices))
        return rows

    async def note_bmc_check(
        self, check_id: str, error: str, writes: list[dict[str, Any]] | None, at: datetime
    ) -> None:
        """Report a write cycle's restore on its verification (see `_bmc_checks.note_many`)."""
        require_aware("at", at)
        await self._write(_bmc_checks.note_many, (check_id, error, writes, at))

    async def finish_bmc_check(
        self,
        check_id: str,
        status: str,
        *,
        verdict: str = "",
        result: dict[str, Any] | None = None,
        writes: list[dict[str, Any]] | None = None,
        error: str = "",
        at: datetime,
    ) -> None:
        """Record how a running verification ended (`done` or `failed`)."""
        require_aware("at", at)
        await self._write(_bmc_checks.finish_many, (check_id, status, verdict, result, writes, error, at))

    async def interrupt_bmc_checks(self, owner: str, at: datetime) -> int:
        """Mark the verifications `owner` was running `interrupted` (it restarted); how many."""
        require_aware("at", at)
        count: int = await self._write(_bmc_checks.interrupt_many, (owner, at))
        return count

    async def list_bmc_checks(
        self,
        *,
        device: str | None = None,
        batch_id: str | None = None,
        status: str | None = None,
        limit: int = 100,
        after: tuple[datetime, str] | None = None,
        devices: Sequence[str] | None = None,
    ) -> list[BmcCheckRow]:
        """Verifications, newest first: from just after the row `after` (created_at, check id)
        names (a keyset page), of `devices` when given."""
        return await self._read(_bmc_checks.list_checks, device, batch_id, status, limit, after, devices)

    async def bmc_check(self, check_id: str) -> BmcCheckRow | None:
        """One verification by its id, or None."""
        return await self._read(_bmc_checks.get_check, check_id)

    async def resolve_bmc_check(self, name: str) -> tuple[str, str]:
        """("check", id), ("batch", id), or ("", why): what a verification id, batch id or unique
        prefix names (`_bmc_checks.resolve`)."""
        return await self._read(_bmc_checks.resolve, name)

    async def bmc_check_batch(self, batch_id: str, after: str = "", limit: int = 500) -> list[BmcCheckRow]:
        """A page of a run's verifications by check id: the `limit` after `after`."""
        return await self._read(_bmc_checks.batch_page, batch_id, after, limit)

    async def bmc_check_progress(self, batch_id: str) -> dict[tuple[str, str], int]:
        """How many of a run's verifications are in each (status, verdict), counted in SQL."""
        return await self._read(_bmc_checks.batch_progress, batch_id)

    async def last_bmc_checks(self, devices: Sequence[str] | None = None) -> dict[str, BmcCheckRow]:
        """Each device's last finished verification (all devices, or those named), by device."""
        return await self._read(_bmc_checks.last_per_device, devices)

    # --- write cycles: priors made durable before a write, closed once restored (`_write_cycles`) ----

    async def open_write_cycle(self, row: WriteCycleRow) -> None:
        """Make a cycle's priors durable (committed when this returns: before its first write)."""
        require_aware("created_at", row.created_at)
        await self._write(_write_cycles.insert_many, row)

    async def close_write_cycle(
        self,
        cycle_id: str,
        report: dict[str, Any],
        at: datetime,
        *,
        owner: str,
        epoch: int,
        restored: bool = True,
    ) -> bool:
        """Record how the cycle ended: `closed` once every cap is proven back, else it stays `open`
        (with the last attempt's report) for the next restore. Written only while `owner` at
        `epoch` holds it open; False (nothing written) once another took it over, or it closed."""
        require_aware("at", at)
        status = _write_cycles.CLOSED if restored else _write_cycles.OPEN
        args = (cycle_id, owner, epoch, status, report, at if restored else None)
        return bool(await self._write(_write_cycles.close_many, args))

    async def take_write_cycle(self, row: WriteCycleRow, owner: str) -> WriteCycleRow | None:
        """Take an open cycle over from the epoch `row` shows (a compare-and-set): the row as now
        held (`owner`, epoch + 1), or None when it moved on meanwhile (closed, or taken by another)."""
        taken = await self._write(_write_cycles.take_many, (row.cycle_id, row.epoch, owner))
        return replace(row, owner=owner, epoch=row.epoch + 1) if taken else None

    async def holds_write_cycle(self, row: WriteCycleRow) -> bool:
        """Whether `row.owner` at `row.epoch` still holds the cycle open (read before each restore)."""
        return await self._read(_write_cycles.held_by, row.cycle_id, row.owner, row.epoch)

    async def open_write_cycles(self, devices: Sequence[str] | None = None) -> list[WriteCycleRow]:
        """Cycles not proven restored (all devices, or those named), oldest first."""
        return await self._read(_write_cycles.open_cycles, devices)

    async def write_cycles_of(self, origin: str) -> list[WriteCycleRow]:
        """The cycles a verification or request ran (`verify ID`, `bmc_health ID`)."""
        return await self._read(_write_cycles.cycles_of, origin)

    # --- each device's reachability (`_bmc_health`) -----------------------------------------------

    async def record_bmc_access(self, accesses: Sequence[BmcAccess]) -> None:
        """Record accesses (in order) in one transaction."""
        for a in accesses:
            require_aware("at", a.at)
            require_aware("cert_not_after", a.cert_not_after)
        if accesses:
            await self._write(_bmc_health.record_many, list(accesses))

    async def bmc_health(
        self,
        devices: Sequence[str] | None = None,
        limit: int = 1_000_000,
        *,
        after: str = "",
        unreachable: bool = False,
    ) -> list[BmcHealthRow]:
        """Every device's health row (or those named), by device id: the `limit` after `after` (a
        page), only those whose last access failed when `unreachable`."""
        return await self._read(_bmc_health.list_health, devices, limit, after, unreachable)


def _ping(engine: Any) -> None:
    conn: Connection
    with engine.connect() as conn:
        conn.exec_driver_sql("SELECT 1")
