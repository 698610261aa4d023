"""Plain, frozen row types that cross the store's API (callers never see SQLAlchemy objects).

Every datetime going in must be timezone-aware; every datetime coming out is timezone-aware UTC.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple


class RequestStatus(enum.StrEnum):
    """Journal status of a request. Values are what the ``requests.status`` column holds."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"


class VerificationStatus(enum.StrEnum):
    """Status of a post-change verification. Values are what ``verifications.status`` holds."""

    PENDING = "pending"
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """Where the database's schema stands relative to the migrations shipped with this code."""

    current: str | None
    head: str
    up_to_date: bool
    #: the database is at a revision these migrations do not know: a newer release's schema
    newer: bool = False


@dataclass(slots=True)
class StoreStats:
    """Counters of the group-commit writer (mutated only by the writer thread; read them freely).

    ``batches`` counts batches taken off the queue, ``transactions`` every committed or attempted
    write transaction (a batch that had to be re-run op by op adds one per op), ``ops`` the write
    operations resolved, ``retried_batches`` the batches whose shared transaction failed and were
    re-run op by op, ``failed_ops`` the operations whose caller got an exception,
    ``transient_retries`` transactions re-run after PostgreSQL aborted them (deadlock victim),
    ``lingered`` the times a busy writer waited for a small next batch to fill (`_batch.LINGER_BELOW`).
    """

    batches: int = 0
    transactions: int = 0
    ops: int = 0
    retried_batches: int = 0
    failed_ops: int = 0
    largest_batch: int = 0
    transient_retries: int = 0
    lingered: int = 0


@dataclass(frozen=True, slots=True)
class NewRequest:
    """A request to journal when it is acknowledged."""

    request_id: str
    device: str
    kind: str
    payload: bytes
    trace_id: str
    accepted_at: datetime
    deadline_at: datetime
    owner: str
    #: the device's shard (controller/cluster/shards.py)
    shard: int = 0
    #: the accepting process runs the shard and will queue the request at once (the fast path):
    #: the accept also claims the device's older unfinished requests other controllers journaled
    #: (``Accepted.older``), so they are queued first and the newer one cannot overtake them
    claim_older: bool = False


@dataclass(frozen=True, slots=True)
class Accepted:
    """Result of journaling one request: ``inserted`` is False for a duplicate ``request_id``."""

    request_id: str
    inserted: bool
    seq: int
    #: with ``NewRequest.claim_older``: the device's older unfinished requests, claimed, by seq
    older: tuple[JournalRow, ...] = ()
    #: a duplicate whose journal row was completed when the journaling transaction read it (it
    #: never runs again: nothing more to look up)
    completed: bool = False


@dataclass(frozen=True, slots=True)
class NewVerification:
    """A verification to schedule in the same transaction as a request's completion."""

    verification_id: str
    device: str
    request_id: str
    kind: str
    payload: dict[str, Any]
    due_at: datetime
    max_checks: int


@dataclass(frozen=True, slots=True)
class Completion:
    """Everything that becomes durable when a request finishes, written in one transaction."""

    request_id: str
    device: str
    outcome: str
    error: str
    finished_at: datetime
    response: bytes
    new_state: dict[str, Any] | None
    touch_device: bool
    plugin: str = ""
    model_json: dict[str, Any] | None = None
    verification: NewVerification | None = None
    trace_id: str = ""
    kind: str = ""
    #: receipts: the device writes made, as JSON objects (None: none recorded)
    writes: list[dict[str, Any]] | None = None
    #: desired state: the watts each component now holds by this request ("gpu/0": 500.0)
    desired: dict[str, float | None] | None = None
    #: an internal request (a re-application): journaled, answered to no one (no outbox row)
    internal: bool = False
    #: commit only while this shard lease is still current (None: no check, one process)
    fence: LeaseFence | None = None
    #: when the device call began, if no ``mark_running`` recorded it (a short call): the
    #: completion then records the start itself (started_at, attempts + 1)
    started_at: datetime | None = None
    #: ``new_state`` as JSON text (``json.dumps(new_state, sort_keys=True)``), when the caller has
    #: it already: the store parses and stores this text instead of serialising the state again
    state_text: str | None = None
    #: ``state_text``'s change against the state text the caller believes is stored: taken as
    #: given while it is (controller/execution/state_text.py)
    state_change: StateChange | None = None


#: `StateChange.prior_digest` of a change computed against no stored state (a digest is 32 bytes)
NO_STORED_STATE = b""


@dataclass(frozen=True, slots=True)
class StateChange:
    """A new state's change against a stored one, cut from their JSON texts."""

    #: `state_digest` of the stored state's text the change was computed against; `NO_STORED_STATE`:
    #: against none (no device row, or a row without a state)
    prior_digest: bytes
    #: the audit summary, JSON: ``{key: {"before": old, "after": new}}`` per member whose text changed
    summary: str


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """The shard lease a completion was run under: its fencing token must still be current."""

    shard: int
    owner: str
    token: int


@dataclass(frozen=True, slots=True)
class ShardLease:
    """One row of ``shard_leases``; ``expires_at`` is database time."""

    shard: int
    owner: str
    token: int
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One row of the request journal."""

    seq: int
    request_id: str
    device: str
    kind: str
    payload: bytes
    trace_id: str
    status: str
    outcome: str
    error: str
    attempts: int
    accepted_at: datetime
    deadline_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner: str
    #: the device's shard (controller/cluster/shards.py)
    shard: int


@dataclass(frozen=True, slots=True)
class RequestView(JournalRow):
    """A journal row joined with its outbox row (delivery fields are empty until completed)."""

    response: bytes | None
    delivered_at: datetime | None
    delivery_attempts: int
    delivery_error: str
    dead_lettered_at: datetime | None = None
    #: receipts: the device writes the request made, as JSON objects
    writes: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class DeviceUpsert:
    """One device from the inventory: its plugin and model (never its state)."""

    id: str
    plugin: str
    model_json: dict[str, Any] = field(default_factory=dict)
    in_inventory: bool = True


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One row of ``devices``."""

    id: str
    plugin: str
    model_json: dict[str, Any] | None
    state_json: dict[str, Any] | None
    state_version: int
    created_at: datetime
    updated_at: datetime
    last_request_id: str
    last_kind: str
    last_outcome: str
    last_error: str
    in_inventory: bool


@dataclass(frozen=True, slots=True)
class AuditView:
    """One state change: for each changed top-level key of the state, ``{"before":…, "after":…}``."""

    id: int
    device: str
    request_id: str
    trace_id: str
    kind: str
    at: datetime
    state_version: int
    summary: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OutboxItem:
    """A response waiting for delivery to the topology server."""

    id: int
    device: str
    request_id: str
    response: bytes
    attempts: int
    created_at: datetime
    shard: int = 0


class DueHead(NamedTuple):
    """A device's due head response, without its contents (`Store.due_heads`)."""

    id: int
    device: str
    #: the device's undelivered responses when it was read, this one included
    waiting: int


@dataclass(frozen=True, slots=True)
class VerificationRow:
    """One row of ``verifications``."""

    verification_id: str
    device: str
    request_id: str
    kind: str
    payload: dict[str, Any]
    status: str
    detail: str
    checks: int
    max_checks: int
    created_at: datetime
    due_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class DesiredLimit:
    """One component's desired limit and what the last drift check found."""

    device: str
    component: str
    watts: float | None
    request_id: str
    set_at: datetime
    enforced_watts: float | None = None
    checked_at: datetime | None = None
    drift_at: datetime | None = None
    drift_detail: str = ""


@dataclass(frozen=True, slots=True)
class DriftCheck:
    """One drift check of a device: what is enforced per component, and what is off (with why)."""

    device: str
    at: datetime
    enforced: dict[str, float | None]
    #: component -> one line ("desired 500 W, enforced 1200 W"); empty when nothing drifted
    drifted: dict[str, str]
    #: "report" or "reapply: <request id>" (what the controller did about it)
    action: str = "report"
    #: a node served in-band and out-of-band: per component, what each path read ("inband": 500.0)
    paths: dict[str, dict[str, float | None]] = field(default_factory=dict)
    #: per drifted component, its findings: "inband"/"outofband" (that path is off), "disagree"
    findings: dict[str, list[str]] = field(default_factory=dict)


def require_aware(name: str, value: datetime | None) -> None:
    # Fail in the caller, not later inside a shared batch where it would cost a retry round.
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value!r}")
