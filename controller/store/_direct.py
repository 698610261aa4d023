"""Statements the completion path runs for every request, executed on the driver's cursor.

A statement is still built with SQLAlchemy (once, at import) and compiled by SQLAlchemy (once per
dialect, and per length of its IN list); only its execution skips SQLAlchemy's per-execution
machinery: the compiled-cache lookup, the execution context, the bound parameters' processing
through each type's processor one row at a time, and the result proxy. On the fan-out's steady
wave that machinery was over half of the store writer's CPU (an executemany UPDATE of 6 journal
rows: 240 us through `Connection.execute`, 77 us on the cursor; a 6-id IN select 77 against 6 us).

The values are converted by the same processors SQLAlchemy would apply (each bound type's
`bind_processor` and `result_processor` for the dialect), so what is stored and read back is the
same text or value either way. A driver error is raised as SQLAlchemy's (`DBAPIError.instance`,
as `Connection.execute` raises it: `is_outage`, the batch's retry of deadlock victims and its
one-by-one rerun see no difference), and a lost connection is invalidated as SQLAlchemy would.
"""

from __future__ import annotations

import collections
import contextlib
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._models import UTCDateTime

_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    #: qmark (SQLite): the bound names in placeholder order; None: named (`%(name)s`, psycopg)
    order: tuple[str, ...] | None
    #: name -> the value a bound literal carries (`values(status="completed")`)
    fixed: Mapping[str, Any]
    #: name -> its type's bind processor, where it has one
    bind: Mapping[str, Callable[[Any], Any]]
    #: the selected columns' result processors (None where a value comes as the driver gives it)
    result: tuple[Callable[[Any], Any] | None, ...]
    row: Any
    #: qmark: the values of `order`'s names, in that order, from a row's parameters (None without
    #: an order: named parameters go as a mapping)
    take: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = None
    #: qmark: (placeholder index, bind processor) of each placeholder whose type has one
    processed: tuple[tuple[int, Callable[[Any], Any]], ...] = ()


def _taker(order: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function of a mapping giving the values of `order`'s names, as a tuple (in C:
    `itemgetter`, which gives a lone value, not a tuple, for one name)."""
    if len(order) == 1:
        name = order[0]
        return lambda values: (values[name],)
    if not order:
        return lambda values: ()
    return operator.itemgetter(*order)


class Direct:
    """One statement, run on the driver's cursor (see the module docstring).

    `expanding`: the name of the statement's one `expanding` IN parameter, if it has one; the
    statement is compiled once per length of that list (lists go through `chunks`, so few)."""

    def __init__(self, statement: Any, *, expanding: str | None = None, columns: Sequence[str] = ()) -> None:
        self.statement = statement
        self.expanding = expanding
        #: for an INSERT: the columns every row gives (compiled for exactly those)
        self.columns = tuple(columns)
        self._compiled: dict[tuple[str, int], _Compiled] = {}
        #: `insert_returning`'s statements by rows (SQLite only)
        self._multi: dict[int, str] = {}

    def _compile(self, conn: Connection, count: int) -> _Compiled:
        dialect = conn.dialect
        key = (dialect.name, count)
        found = self._compiled.get(key)
        if found is not None:
            return found
        compiled = self.statement.compile(dialect=dialect, column_keys=list(self.columns) or None)
        sql = str(compiled)
        positional = dialect.paramstyle in ("qmark", "numeric", "format")
        if dialect.paramstyle not in ("qmark", "pyformat"):  # pragma: no cover - other drivers
            raise NotImplementedError(f"paramstyle {dialect.paramstyle}")
        order = list(compiled.positiontup or ()) if positional else None
        binds: dict[str, Any] = dict(compiled.binds)
        if self.expanding is not None:
            names = [f"{self.expanding}_{i}" for i in range(count)]
            marks = ", ".join("?" if positional else f"%({n})s" for n in names)
            sql = _POSTCOMPILE.sub(lambda m: marks if m.group(1) == self.expanding else m.group(0), sql)
            if order is not None:
                at = order.index(self.expanding)
                order[at : at + 1] = names
            expanded = binds.pop(self.expanding)
            element_type = expanded.type
            for n in names:
                binds[n] = sa.bindparam(n, type_=element_type)
        if "__[POSTCOMPILE_" in sql:  # pragma: no cover - a statement this module cannot run
            raise NotImplementedError(f"unexpected post-compile parameter in {sql}")
        fixed = {n: b.effective_value for n, b in binds.items() if not b.required}
        bind = {}
        for n, b in binds.items():
            if dialect.name == "sqlite" and isinstance(b.type, UTCDateTime):
                bind[n] = sqlite_utc_text
                continue
            proc = b.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                bind[n] = proc
        result: tuple[Callable[[Any], Any] | None, ...] = ()
        row: Any = None
        if isinstance(self.statement, sa.Select):
            cols = list(self.statement.selected_columns)
            result = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None) for c in cols)
            row = collections.namedtuple("Row", [str(c.key) for c in cols])  # type: ignore[misc,no-redef]
        if order is None:
            found = _Compiled(sql, None, fixed, bind, result, row)
        else:
            processed = tuple((at, bind[n]) for at, n in enumerate(order) if n in bind)
            found = _Compiled(sql, tuple(order), fixed, bind, result, row, _taker(order), processed)
        self._compiled[key] = found
        return found

    def _params(self, c: _Compiled, values: Mapping[str, Any], expanded: Sequence[Any] = ()) -> Any:
        # NOTE: every row of every statement the completion path runs comes through here (13 a
        # completion); merging, processing and ordering by name, one Python step per name, was a
        # third of `complete_many`'s CPU: the values are taken in order in one C call, and only the
        # placeholders whose type has a processor are processed
        merged: Mapping[str, Any] = {**c.fixed, **values} if c.fixed else values
        if self.expanding is not None:
            merged = {k: v for k, v in merged.items() if k != self.expanding}
            merged.update((f"{self.expanding}_{i}", v) for i, v in enumerate(expanded))
        take = c.take
        if take is None:  # no order: named parameters
            named = dict(merged)
            for n, proc in c.bind.items():
                named[n] = proc(named[n])
            return named
        taken = take(merged)
        if not c.processed:
            return taken
        out = list(taken)
        for at, proc in c.processed:
            out[at] = proc(out[at])
        return out

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row of parameters (one executemany)."""
        if not rows:
            return
        c = self._compile(conn, 0)
        _run(conn, c.sql, [self._params(c, r) for r in rows], many=True)

    def insert_returning(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """A positional driver's (SQLite's) INSERT of `rows` as multi-row statements (at most
        `ROWS_PER_INSERT` rows each), and the rows their RETURNING clause gives, in no set order."""
        c = self._compile(conn, 0)
        if c.order is None:
            raise NotImplementedError("multi-row INSERT on the cursor: positional drivers only")
        single = "VALUES (" + ", ".join("?" for _ in c.order) + ")"
        if c.sql.count(single) != 1:  # pragma: no cover - a statement this method cannot run
            raise NotImplementedError(f"not a single-row VALUES clause: {c.sql}")
        out: list[tuple[Any, ...]] = []
        for start in range(0, len(rows), ROWS_PER_INSERT):
            part = rows[start : start + ROWS_PER_INSERT]
            sql = self._multi.get(len(part))
            if sql is None:
                tuples = ", ".join([single[len("VALUES ") :]] * len(part))
                sql = self._multi[len(part)] = c.sql.replace(single, "VALUES " + tuples)
            params = [v for r in part for v in self._params(c, r)]
            out.extend(_run(conn, sql, params, many=False))
        return out

    def select(self, conn: Connection, values: Sequence[Any], **params: Any) -> list[Any]:
        """The rows (named tuples) of the select, its `expanding` list bound to `values`."""
        c = self._compile(conn, len(values))
        found = _run(conn, c.sql, self._params(c, params, values), many=False)
        assert c.row is not None
        procs = c.result
        if not any(procs):
            return [c.row._make(r) for r in found]
        return [c.row._make(v if p is None else p(v) for p, v in zip(procs, r, strict=True)) for r in found]


#: rows per multi-row INSERT (`Direct.insert_returning`): 13 columns a row stay far below SQLite's
#: bound-parameter limit
ROWS_PER_INSERT = 200


def sqlite_utc_text(value: datetime | None) -> str | None:
    """A UTC datetime as SQLite's column holds it: the text `UTCDateTime` and SQLAlchemy's SQLite
    `DATETIME` make of it (naive UTC, `YYYY-MM-DD HH:MM:SS.ffffff`), in one C call instead of two
    conversions and a format with a dict of seven fields (a fifth of an accept's CPU).

    NOTE: the last datetime's text is kept and given again for the same object (a completion binds
    its finish time 13 times, 8 of them in a row: the desired limits' rows): a datetime cannot
    change, and the one kept is referenced here, so no other object can come at its address."""
    global _last_utc_text
    last = _last_utc_text
    if value is last[0]:
        return last[1]
    if value is None:
        return None
    if value.tzinfo is not UTC:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the store needs timezone-aware datetimes")
        value_utc = value.astimezone(UTC)
    else:
        value_utc = value
    text = value_utc.isoformat(" ", "microseconds")[:-6]  # without its "+00:00"
    _last_utc_text = (value, text)
    return text


#: `sqlite_utc_text`'s last datetime and its text (one tuple: replaced whole, read whole)
_last_utc_text: tuple[datetime | None, str | None] = (None, None)


def _run(conn: Connection, sql: str, params: Any, *, many: bool) -> list[Any]:
    dialect = conn.dialect
    raw = conn.connection.driver_connection
    assert raw is not None
    error = dialect.loaded_dbapi.Error
    cursor = raw.cursor()
    try:
        if many:
            cursor.executemany(sql, params)
            return []
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []
    except error as exc:
        lost = dialect.is_disconnect(exc, raw, cursor)
        wrapped = sa.exc.DBAPIError.instance(
            sql, params, exc, error, connection_invalidated=lost, dialect=dialect
        )
        if lost:
            conn.invalidate(wrapped)
        raise wrapped from exc
    finally:
        with contextlib.suppress(error):
            cursor.close()
