"""SQLAlchemy 2 declarative models: the schema that ``migrations/`` creates.

The store queries these tables with Core statements built from the mapped classes; callers see only
the dataclasses in ``_types``. Any change here needs a new Alembic revision (a test compares the
migrated schema with this metadata).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Explicit constraint names keep migrations reproducible, and SQLite batch migrations need them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    PostgreSQL stores ``timestamptz``. SQLite has no time zones, so values are stored as naive UTC
    (which also keeps its text representation sortable) and tagged UTC again when read back.
    Naive datetimes are refused rather than guessed at.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the store needs timezone-aware datetimes")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# SQL NULL (not JSON 'null') for None, so "no state yet" is testable with IS NULL.
JSONDoc = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
# SQLite only aliases the rowid (and autoincrements) for a column typed exactly INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base; ``Base.metadata`` is what Alembic migrates to."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class DeviceModel(Base):
    """A managed device: its inventory entry, its current state and a summary of its last request."""

    __tablename__ = "devices"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    plugin: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    model_json: Mapped[Any | None] = mapped_column(JSONDoc, nullable=True)
    state_json: Mapped[Any | None] = mapped_column(JSONDoc, nullable=True)
    state_version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    last_request_id: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    last_kind: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    last_outcome: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    last_error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    in_inventory: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))


class RequestModel(Base):
    """The request journal: the source of truth for accepted and pending work."""

    __tablename__ = "requests"
    # AUTOINCREMENT on SQLite: seq must never be reused, even after the newest rows are purged.
    __table_args__ = (
        Index("ix_requests_device_seq", "device", "seq"),
        Index("ix_requests_status_seq", "status", "seq"),
        # an executor's claim: the unfinished rows of the shards it leases
        Index("ix_requests_status_shard_seq", "status", "shard", "seq"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String, nullable=False, unique=True)
    device: Mapped[str] = mapped_column(String, nullable=False)
    kind: Mapped[str] = mapped_column(String, nullable=False)
    payload: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    trace_id: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    status: Mapped[str] = mapped_column(String, nullable=False)
    outcome: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    accepted_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    deadline_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    owner: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    #: receipts: the device writes the request made (a list of `plugins.base.DeviceWrite` as JSON)
    writes_json: Mapped[Any | None] = mapped_column(JSONDoc, nullable=True)
    #: the device's shard (controller/cluster/shards.py), fixed at accept: only its lease holder runs it
    shard: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")


class OutboxModel(Base):
    """Responses to deliver to the topology server, written with the request's completion."""

    __tablename__ = "outbox"
    __table_args__ = (
        # Only undelivered rows are ever scanned for delivery; keep that index small.
        Index(
            "ix_outbox_undelivered_device_id",
            "device",
            "id",
            sqlite_where=text("delivered_at IS NULL"),
            postgresql_where=text("delivered_at IS NULL"),
        ),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    device: Mapped[str] = mapped_column(String, nullable=False)
    request_id: Mapped[str] = mapped_column(String, nullable=False, unique=True)
    response: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    #: set when the receiver refused the response for good (too large, malformed): it is never
    #: sent again and no longer holds back the device's later responses
    dead_lettered_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: the request's shard: its lease holder delivers it (one sender per device keeps the order)
    shard: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")


class AuditModel(Base):
    """Append-only log of device state changes."""

    __tablename__ = "state_audit"
    __table_args__ = (Index("ix_state_audit_device_id", "device", "id"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    device: Mapped[str] = mapped_column(String, nullable=False)
    request_id: Mapped[str] = mapped_column(String, nullable=False)
    trace_id: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    kind: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    state_version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    summary: Mapped[Any] = mapped_column(JSONDoc, nullable=False)


class VerificationModel(Base):
    """Deferred checks that a change really took effect on the device."""

    __tablename__ = "verifications"
    __table_args__ = (
        Index("ix_verifications_status_due_at", "status", "due_at"),
        Index("ix_verifications_device_created_at", "device", "created_at"),
    )

    verification_id: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, nullable=False)
    request_id: Mapped[str] = mapped_column(String, nullable=False)
    kind: Mapped[str] = mapped_column(String, nullable=False)
    payload: Mapped[Any] = mapped_column(JSONDoc, nullable=False)
    status: Mapped[str] = mapped_column(String, nullable=False)
    detail: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    checks: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_checks: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    due_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class BmcCheckModel(Base):
    """Verifications of a device's readiness for power management (`devicectl verify`): one row per
    device and run, journaled before it starts so a restart resumes or reports it, never loses it."""

    __tablename__ = "bmc_checks"
    __table_args__ = (
        Index("ix_bmc_checks_status_created_at", "status", "created_at"),
        Index("ix_bmc_checks_device_created_at", "device", "created_at"),
        Index("ix_bmc_checks_batch_id", "batch_id"),
    )

    check_id: Mapped[str] = mapped_column(String, primary_key=True)
    batch_id: Mapped[str] = mapped_column(String, nullable=False)
    device: Mapped[str] = mapped_column(String, nullable=False)
    write_cycle: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    #: queued, running, done, failed (it could not run) or interrupted (the process stopped mid-check)
    status: Mapped[str] = mapped_column(String, nullable=False)
    #: pass, warn or fail once done; '' before
    verdict: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    query: Mapped[Any] = mapped_column(JSONDoc, nullable=False)
    result: Mapped[Any] = mapped_column(JSONDoc, nullable=True)
    writes: Mapped[Any] = mapped_column(JSONDoc, nullable=True)
    error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    #: the controller instance running it (a restart of the same instance finds its own)
    owner: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class WriteCycleModel(Base):
    """The write cycle's journal: the value and mode of every cap a cycle will touch, durable before
    its first write; `open` until every cap is proven back, so a crash is restored at the next start."""

    __tablename__ = "write_cycles"
    __table_args__ = (
        Index("ix_write_cycles_device_status", "device", "status"),
        Index("ix_write_cycles_status", "status"),
    )

    cycle_id: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, nullable=False)
    #: what ran it: `verify CHECK_ID` or `bmc_health REQUEST_ID`
    origin: Mapped[str] = mapped_column(String, nullable=False)
    #: component key -> {"watts", "capped", "mode", "resource"} before the cycle
    priors: Mapped[Any] = mapped_column(JSONDoc, nullable=False)
    #: open (a cap may hold a test value) or closed (every cap proven back)
    status: Mapped[str] = mapped_column(String, nullable=False)
    #: how it was closed: each component's restore, and by whom
    report: Mapped[Any] = mapped_column(JSONDoc, nullable=True)
    #: the controller instance holding the journal (running the cycle, or restoring it)
    owner: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: takeovers so far (0: the cycle's own process): a holder writes and closes only while its
    #: epoch is current (a takeover is a compare-and-set of it)
    epoch: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    #: component -> the request that had set its desired limit when the cycle opened (read in the
    #: insert's transaction); NULL for a cycle opened before this column existed
    desired_at_open: Mapped[Any | None] = mapped_column(JSONDoc, nullable=True)


class DesiredLimitModel(Base):
    """Desired state: the limit each component should hold, with the request that set it, and
    what the last drift check found enforced (docs/desired-state.md)."""

    __tablename__ = "desired_limits"

    device: Mapped[str] = mapped_column(String, primary_key=True)
    #: "node", "cpu", "memory" (totals) or "gpu/<id>"
    component: Mapped[str] = mapped_column(String, primary_key=True)
    #: watts in force after the change (read back); None: no cap
    watts: Mapped[float | None] = mapped_column(Float, nullable=True)
    request_id: Mapped[str] = mapped_column(String, nullable=False)
    set_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    enforced_watts: Mapped[float | None] = mapped_column(Float, nullable=True)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: when the last check found the component off its desired value (None: never)
    drift_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    drift_detail: Mapped[str] = mapped_column(Text, nullable=False, server_default="")


class BmcHealthModel(Base):
    """Each device's reachability as the controller last saw it (DPS's `dpsctl check status`)."""

    __tablename__ = "bmc_health"

    device: Mapped[str] = mapped_column(String, primary_key=True)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: when the current run of failed accesses began (None: the last access succeeded)
    inaccessible_since: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, nullable=False, server_default="")
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: a check of the device (a drift sweep's) is running
    sync_in_progress: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    #: the BMC's TLS certificate's notAfter, from its last readiness verification
    cert_not_after: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)


class LeaseModel(Base):
    """Liveness of controller processes: a journal row whose owner has no fresh lease is up for grabs."""

    __tablename__ = "controller_leases"

    owner: Mapped[str] = mapped_column(String, primary_key=True)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)
    #: `all`, `frontend` or `executor`: executors (and `all`) share the shards between them
    role: Mapped[str] = mapped_column(String, nullable=False, server_default="all")


class ShardLeaseModel(Base):
    """Which controller runs each shard's requests: the owner until `expires_at` (database time).

    `token` grows by one on every acquisition: a completion commits only while its
    (shard, owner, token) is still current, so a process that lost the lease writes nothing."""

    __tablename__ = "shard_leases"

    shard: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    owner: Mapped[str] = mapped_column(String, nullable=False, server_default="")
    token: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, nullable=False)


# The mapped classes' tables typed as Table (``Model.__table__`` is only typed as a FromClause).
DEVICES: Table = Base.metadata.tables["devices"]
REQUESTS: Table = Base.metadata.tables["requests"]
OUTBOX: Table = Base.metadata.tables["outbox"]
STATE_AUDIT: Table = Base.metadata.tables["state_audit"]
VERIFICATIONS: Table = Base.metadata.tables["verifications"]
CONTROLLER_LEASES: Table = Base.metadata.tables["controller_leases"]
DESIRED_LIMITS: Table = Base.metadata.tables["desired_limits"]
SHARD_LEASES: Table = Base.metadata.tables["shard_leases"]
BMC_CHECKS: Table = Base.metadata.tables["bmc_checks"]
WRITE_CYCLES: Table = Base.metadata.tables["write_cycles"]
BMC_HEALTH: Table = Base.metadata.tables["bmc_health"]

__all__ = [
    "BMC_CHECKS",
    "BMC_HEALTH",
    "CONTROLLER_LEASES",
    "DESIRED_LIMITS",
    "DEVICES",
    "OUTBOX",
    "REQUESTS",
    "SHARD_LEASES",
    "STATE_AUDIT",
    "VERIFICATIONS",
    "WRITE_CYCLES",
    "AuditModel",
    "Base",
    "BmcCheckModel",
    "DesiredLimitModel",
    "DeviceModel",
    "LeaseModel",
    "OutboxModel",
    "RequestModel",
    "ShardLeaseModel",
    "UTCDateTime",
    "VerificationModel",
    "WriteCycleModel",
]
