"""A completion's change to its device row: last request, state with version, and audit trail."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Connection

from ._database import chunks, insert_for
from ._devices import normalise_json
from ._direct import Direct
from ._models import DEVICES, STATE_AUDIT, UTCDateTime
from ._types import NO_STORED_STATE, Completion

D = DEVICES
A = STATE_AUDIT

_DEVICE_FIELDS = tuple(c.name for c in D.columns)
# Columns an upsert may overwrite; created_at stays as first written.
_UPSERT_FIELDS = tuple(name for name in _DEVICE_FIELDS if name not in ("id", "created_at"))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"Out of range float values are not JSON compliant: {name}")


def _new_state(c: Completion) -> Any:
    """The completion's state as it will read back: its JSON text parsed when it came with one
    (as `normalise_json` would give, NaN and infinities refused alike), else normalised."""
    if c.state_text is not None:
        return json.loads(c.state_text, parse_constant=_refuse_constant)
    return normalise_json(c.new_state)


def _differ(old: Any, new: Any) -> bool:
    """Whether two JSON values differ as JSON text, the way a state is compared.

    1, 1.0 and true are equal in Python but distinct JSON: a plugin that writes 1.0 where it wrote
    1 has changed its state, which is stored as given (a new version and an audit row), as the
    runner's change cut from the member texts (`controller/execution/state_text.py`) says. Python's
    `!=` decides first (unequal values are unequal texts); the texts only where it says equal.
    """
    return old != new or json.dumps(old, sort_keys=True) != json.dumps(new, sort_keys=True)


def state_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """``{key: {"before": old, "after": new}}`` for every top-level key whose value changed."""
    old = before or {}
    return {
        key: {"before": old.get(key), "after": after.get(key)}
        for key in sorted(set(old) | set(after))
        if (key in old) != (key in after) or _differ(old.get(key), after.get(key))
    }


def _upsert(conn: Connection, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(_upsert_statement(conn.dialect.name), rows)


@functools.cache
def _upsert_statement(dialect: str) -> Any:
    # NOTE: built once per backend: `insert.excluded` builds a column collection each time it is
    # asked for, which showed in the completion path's profile.
    stmt = insert_for(dialect, D)
    return stmt.on_conflict_do_update(
        index_elements=[D.c.id], set_={name: stmt.excluded[name] for name in _UPSERT_FIELDS}
    )


def apply_completions(
    conn: Connection,
    completions: Sequence[Completion],
    *,
    trace_ids: Mapping[str, str],
    kinds: Mapping[str, str],
) -> None:
    """Apply the device side of completions (in order) inside the completing transaction.

    Each device row is read once (locked on PostgreSQL), changed in memory by every completion
    of the batch in turn, and written once; each state change appends one audit row. A
    completion's `state_change` is taken as given while the device's state text is the one it was
    computed against (`_given`); otherwise both states are parsed and compared here.
    """
    wanted = sorted({c.device for c in completions if c.touch_device or c.new_state is not None})
    if not wanted:
        return
    rows, texts = _read_rows(conn, wanted)  # texts: each device's state text, where known

    def stored_state(row: dict[str, Any]) -> Any:
        if row["state_json"] is _UNREAD:
            row["state_json"] = json.loads(texts[row["id"]])
        return row["state_json"]

    audits: list[dict[str, Any]] = []
    touched: dict[str, dict[str, Any]] = {}
    whole: set[str] = set()  # devices new or with a changed model: the whole row is written
    # devices whose state changed -> the new state's JSON text (None: the whole row is written)
    restated: dict[str, str | None] = {}
    for c in completions:
        if not (c.touch_device or c.new_state is not None):
            continue
        kind = c.kind or kinds.get(c.request_id, "")
        if c.device not in rows:
            # First time this device is written; a device someone runs requests on is in inventory.
            rows[c.device] = _new_row(c)
            whole.add(c.device)
        row = rows[c.device]
        if c.touch_device:
            row["last_request_id"] = c.request_id
            row["last_kind"] = kind
            row["last_outcome"] = c.outcome
            row["last_error"] = c.error
            row["updated_at"] = c.finished_at
            if c.plugin:
                row["plugin"] = c.plugin
            if c.model_json is not None:
                model = normalise_json(c.model_json)
                if model != row["model_json"]:
                    row["model_json"] = model
                    whole.add(c.device)
        if c.new_state is not None:
            summary: str | None = None
            if _given(c, texts.get(c.device), row):
                assert c.state_text is not None and c.state_change is not None
                if c.state_change.summary != "{}":
                    summary = c.state_change.summary
                    row["state_json"] = _UNREAD
            else:
                new_state = _new_state(c)
                old_state = stored_state(row)
                if _differ(old_state, new_state):
                    summary = json.dumps(state_diff(old_state, new_state))
                    row["state_json"] = new_state
            if summary is not None:
                restated[c.device] = c.state_text
                if c.state_text is None:
                    texts.pop(c.device, None)
                else:
                    texts[c.device] = c.state_text
                row["state_version"] += 1
                row["updated_at"] = c.finished_at
                audits.append(
                    {
                        "device": c.device,
                        "request_id": c.request_id,
                        "trace_id": c.trace_id or trace_ids.get(c.request_id, ""),
                        "kind": kind,
                        "at": c.finished_at,
                        "state_version": row["state_version"],
                        "b_summary": summary,
                    }
                )
        touched[c.device] = row
    for device, text in restated.items():
        if text is None:
            whole.add(device)
    # NOTE: a whole row (a new device, a changed model) whose new state came as text is written
    # without it and then given the text, as a changed state is: its state is not parsed here to be
    # serialised again (a device's first completion: 18 KiB of a GB200 tray's state, both ways)
    as_text = {device for device in whole if restated.get(device) is not None}
    _upsert(
        conn,
        [
            {**row, "state_json": None if device in as_text else stored_state(row)}
            for device, row in touched.items()
            if device in whole
        ],
    )
    # NOTE: most completions change only the last-request columns and the state; writing just
    # those, the state as the text the caller serialised, spares serialising the model and the
    # state again (the whole-row upsert showed in the profile)
    restates = [
        {**_touch_params(row), "b_state": restated[device], "b_version": row["state_version"]}
        for device, row in touched.items()
        if device in restated and (device not in whole or device in as_text)
    ]
    _restate_statement(conn.dialect.name).many(conn, restates)
    written = whole | restated.keys()
    _TOUCH_DIRECT.many(conn, [_touch_params(row) for device, row in touched.items() if device not in written])
    _audit_statement(conn.dialect.name).many(conn, audits)


def state_digest(text: str) -> bytes:
    """The digest a completion's `StateChange` names its stored state text by."""
    return hashlib.sha256(text.encode()).digest()


#: a device row whose state was read (or last set) as text only: parsed when needed
_UNREAD = object()


def _read_rows(conn: Connection, devices: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The device rows, and each device's state text where it was read as text (SQLite)."""
    rows: dict[str, dict[str, Any]] = {}
    texts: dict[str, str] = {}
    query = _devices_query(conn.dialect.name)
    for part in chunks(devices):
        for found in query.select(conn, part):
            row = rows[found.id] = found._asdict()
            if "state_text" in row:  # SQLite
                text = row.pop("state_text")
                row["state_json"] = None if text is None else _UNREAD
                if text is not None:
                    texts[found.id] = text
    return rows, texts


def _given(c: Completion, stored_text: str | None, row: Mapping[str, Any]) -> bool:
    """Whether `c.state_change` may be taken as given: the device's state text is the one it was
    computed against (or, for a change computed against no stored state, the device has none and
    the change is not empty), and the new text holds no NaN or infinity (which the parse path
    refuses)."""
    change, text = c.state_change, c.state_text
    if change is None or text is None or "NaN" in text or "Infinity" in text:
        return False
    if change.prior_digest == NO_STORED_STATE:
        # NOTE: an empty change against no state ("{}", a new state `{}`) is still a new state to
        # store with its version and audit row: the parse path writes it
        return stored_text is None and row["state_json"] is None and change.summary != "{}"
    return stored_text is not None and state_digest(stored_text) == change.prior_digest


def _new_row(c: Completion) -> dict[str, Any]:
    return {
        "id": c.device,
        "plugin": c.plugin,
        "model_json": None,
        "state_json": None,
        "state_version": 0,
        "created_at": c.finished_at,
        "updated_at": c.finished_at,
        "last_request_id": "",
        "last_kind": "",
        "last_outcome": "",
        "last_error": "",
        "in_inventory": True,
    }


@functools.cache
def _audit_statement(dialect: str) -> Direct:
    """An audit row with its summary bound as JSON text (cast on PostgreSQL, whose column is JSONB)."""
    text = sa.bindparam("b_summary", type_=sa.Text())
    columns = ("device", "request_id", "trace_id", "kind", "at", "state_version")
    statement = sa.insert(A).values(summary=sa.cast(text, JSONB) if dialect == "postgresql" else text)
    return Direct(statement, columns=columns)


@functools.cache
def _devices_query(dialect: str) -> Direct:
    """The device rows a completion batch changes (locked on PostgreSQL). On SQLite the state comes
    as its stored text (`state_text`), parsed only where a completion's change is not taken as given."""
    if dialect == "postgresql":
        columns: list[Any] = list(D.columns)
    else:
        columns = [c for c in D.columns if c.name != "state_json"]
        columns.append(sa.type_coerce(D.c.state_json, sa.Text()).label("state_text"))
    query = sa.select(*columns).where(D.c.id.in_(sa.bindparam("b_ids", expanding=True))).order_by(D.c.id)
    return Direct(query.with_for_update() if dialect == "postgresql" else query, expanding="b_ids")


_TOUCH = (
    sa.update(D)
    .where(D.c.id == sa.bindparam("b_id"))
    .values(
        plugin=sa.bindparam("b_plugin"),
        last_request_id=sa.bindparam("b_last_request_id"),
        last_kind=sa.bindparam("b_last_kind"),
        last_outcome=sa.bindparam("b_last_outcome"),
        last_error=sa.bindparam("b_last_error"),
        updated_at=sa.bindparam("b_updated_at", type_=UTCDateTime()),
    )
)
_TOUCH_DIRECT = Direct(_TOUCH)


@functools.cache
def _restate_statement(dialect: str) -> Direct:
    """`_TOUCH` plus the state, bound as JSON text (cast on PostgreSQL, whose column is JSONB)."""
    text = sa.bindparam("b_state", type_=sa.Text())
    return Direct(
        _TOUCH.values(
            state_json=sa.cast(text, JSONB) if dialect == "postgresql" else text,
            state_version=sa.bindparam("b_version", type_=sa.Integer()),
        )
    )


def _touch_params(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "b_id": row["id"],
        "b_plugin": row["plugin"],
        "b_last_request_id": row["last_request_id"],
        "b_last_kind": row["last_kind"],
        "b_last_outcome": row["last_outcome"],
        "b_last_error": row["last_error"],
        "b_updated_at": row["updated_at"],
    }
