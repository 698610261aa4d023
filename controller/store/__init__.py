"""Persistence for devicectl: request journal, devices and state, outbox, audit log, verifications
(of changes, and of readiness: `bmc_checks`), and each device's reachability (`bmc_health`).

SQLAlchemy 2 on SQLite (WAL, the default) or PostgreSQL (psycopg 3); schema managed by Alembic
(``migrations/``). Writes are group-committed on one writer thread; reads use a small thread pool;
both are exposed as coroutines on :class:`Store`.
"""

from ._batch import StoreClosedError, WriteFailure, is_outage
from ._bmc_checks import BmcCheckRow
from ._bmc_health import BmcAccess, BmcHealthRow
from ._database import (
    SchemaNewerError,
    SchemaOutdatedError,
    is_sqlite_memory,
    newer_schema_message,
    normalise_url,
    postgres_engine,
    revisions,
)
from ._fleet import FleetCounts
from ._retention import Backlog, PruneResult, RetentionPolicy, outbox_backlog, prune, table_rows
from ._shards import LeaseRound, LeaseRoundResult
from ._state_changes import state_digest
from ._store import Store
from ._types import (
    NO_STORED_STATE,
    Accepted,
    AuditView,
    Completion,
    DesiredLimit,
    DeviceUpsert,
    DeviceView,
    DriftCheck,
    DueHead,
    JournalRow,
    LeaseFence,
    NewRequest,
    NewVerification,
    OutboxItem,
    RequestStatus,
    RequestView,
    SchemaStatus,
    ShardLease,
    StateChange,
    StoreStats,
    VerificationRow,
    VerificationStatus,
)
from ._write_cycles import WriteCycleRow

__all__ = [
    "NO_STORED_STATE",
    "Accepted",
    "AuditView",
    "Backlog",
    "BmcAccess",
    "BmcCheckRow",
    "BmcHealthRow",
    "Completion",
    "DesiredLimit",
    "DeviceUpsert",
    "DeviceView",
    "DriftCheck",
    "DueHead",
    "FleetCounts",
    "JournalRow",
    "LeaseFence",
    "LeaseRound",
    "LeaseRoundResult",
    "NewRequest",
    "NewVerification",
    "OutboxItem",
    "PruneResult",
    "RequestStatus",
    "RequestView",
    "RetentionPolicy",
    "SchemaNewerError",
    "SchemaOutdatedError",
    "SchemaStatus",
    "ShardLease",
    "StateChange",
    "Store",
    "StoreClosedError",
    "StoreStats",
    "VerificationRow",
    "VerificationStatus",
    "WriteCycleRow",
    "WriteFailure",
    "is_outage",
    "is_sqlite_memory",
    "newer_schema_message",
    "normalise_url",
    "outbox_backlog",
    "postgres_engine",
    "prune",
    "revisions",
    "state_digest",
    "table_rows",
]
