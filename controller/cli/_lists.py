"""kubectl habits shared by every list (`requests list`, `devices list`, `verifications`):
`--limit N` / `--all` with a line on stderr when rows were left out, `--since DURATION`,
`--watch`, `--no-headers`, `-l key=value` (inventory labels), and `-o name` (KIND/ID per row).
`-o csv` is the table's (`_render`). The admin API answers in pages; `follow` reads them all."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import click
from google.protobuf.message import Message

from controller.cli._errors import UsageError
from controller.cli._options import Options
from controller.cli._render import as_dict, err_console, print_item, print_json

T = TypeVar("T", bound=Message)

#: `--all`: every row (the admin API answers in pages, followed one after the other)
ALL = 1_000_000
#: rows asked for per page (the server may answer fewer: it keeps pages far below 4 MiB)
PAGE_ROWS = 500
#: seconds between two looks with `--watch`
WATCH_INTERVAL = 2.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def selector_option(f: Any) -> Any:
    """`-l rack=r12,model!=GB300`: only the inventory devices whose labels match (kubectl's)."""
    return click.option(
        "-l",
        "--selector",
        metavar="KEY=VALUE[,...]",
        default="",
        help="only inventory devices with these labels (key=value or key!=value, comma-separated)",
    )(f)


def follow(ask: Callable[[str], tuple[Sequence[T], str]], limit: int) -> list[T]:
    """Rows from page after page (`ask(page_token)` -> rows and the next token) until `limit`
    rows or the last page."""
    rows: list[T] = []
    token = ""
    while True:
        got, token = ask(token)
        rows.extend(got)
        if not token or len(rows) >= limit:
            return rows[:limit]


def page_rows(limit: int) -> int:
    return min(limit, PAGE_ROWS)


def list_options(
    default_limit: int | None, *, since: bool = True, selector: bool = True
) -> Callable[[Any], Any]:
    """The flags every list takes (`since=False`: a list with no time order, devices;
    `default_limit=None`: every row unless --limit says otherwise)."""

    def attach(f: Any) -> Any:
        options = [
            click.option(
                "--limit",
                type=click.IntRange(min=1),
                default=default_limit,
                show_default=default_limit is not None,
                help="show at most N rows (a line on stderr says when more were left out)"
                + ("" if default_limit is not None else "  [default: every row]"),
            ),
            click.option("--all", "all_rows", is_flag=True, default=False, help="every row, no --limit"),
            click.option(
                "-w", "--watch", is_flag=True, default=False, help="keep watching: print rows as they change"
            ),
            click.option("--no-headers", is_flag=True, default=False, help="no title and header line"),
        ]
        if selector:
            options.append(selector_option)
        if since:
            options.append(
                click.option("--since", metavar="DURATION", help="only rows newer than this: 30s, 10m, 2h")
            )
        for option in reversed(options):
            f = option(f)
        return f

    return attach


def since_time(value: str | None) -> datetime | None:
    """`--since 10m`: the moment that far back (UTC); None when not given."""
    if not value:
        return None
    match = _DURATION.match(value.strip())
    if match is None:
        raise UsageError(f"--since {value!r}: give a duration such as 30s, 10m, 2h or 1d")
    return datetime.now(UTC) - timedelta(seconds=float(match[1]) * _UNIT[match[2]])


@dataclass
class Page(Generic[T]):
    rows: list[T]
    #: more rows matched than were shown
    cut: bool
    limit: int


def fetch(
    args: Options,
    get: Callable[[int], Sequence[T]],
    at: Callable[[T], Any] | None = None,
) -> Page[T]:
    """Ask for one row more than the limit (so a cut is known, not guessed); with `--since`, keep
    the rows whose time `at(row)` is that recent (lists come newest first: an older row ends it)."""
    every = getattr(args, "all_rows", False) or args.limit is None
    limit = ALL if every else int(args.limit)
    rows = list(get(limit + 1))
    cut = len(rows) > limit
    rows = rows[:limit]
    start = since_time(getattr(args, "since", None))
    if start is not None and at is not None:
        recent = [r for r in rows if at(r).ToDatetime(tzinfo=UTC) >= start]
        cut = cut and len(recent) == len(rows)
        rows = recent
    return Page(rows, cut, limit)


def note_cut(page: Page[Any], what: str) -> None:
    """The line that says rows were left out (stderr, so scripts reading stdout are not fooled)."""
    if page.cut:
        err_console.print(
            f"showing the first {page.limit} {what}; more match: raise --limit or give --all",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def show(
    args: Options,
    look: Callable[[], Page[T]],
    *,
    kind: str,
    name: Callable[[T], str],
    render: Callable[[list[T]], None],
    what: str,
    record: Callable[[T], dict[str, Any]] = as_dict,
) -> int:
    """One list in the output asked for; with `--watch`, then every change until Ctrl-C.
    `record`: a row as JSON (default: the message's fields)."""
    page = look()
    watching = bool(getattr(args, "watch", False))
    if watching and args.json:  # a stream: one JSON line (or YAML document) per row, from the start
        for row in page.rows:
            print_item(record(row))
    else:
        _print(args, page.rows, kind=kind, name=name, render=render, record=record)
    note_cut(page, what)
    if watching:
        _watch(args, look, page, kind=kind, name=name, render=render, record=record)
    return 0


def _print(
    args: Options,
    rows: list[T],
    *,
    kind: str,
    name: Callable[[T], str],
    render: Callable[[list[T]], None],
    record: Callable[[T], dict[str, Any]],
) -> None:
    if args.json:
        print_json([record(r) for r in rows])
    elif args.output == "name":
        for row in rows:
            click.echo(f"{kind}/{name(row)}")
    else:
        render(rows)


def _watch(
    args: Options,
    look: Callable[[], Page[T]],
    page: Page[T],
    *,
    kind: str,
    name: Callable[[T], str],
    render: Callable[[list[T]], None],
    record: Callable[[T], dict[str, Any]],
) -> None:
    """Every WATCH_INTERVAL seconds, the rows that are new or changed since: a table row each (no
    header again), a JSON line each with `-o json`, KIND/ID with `-o name`; until Ctrl-C."""
    from controller.cli import _render

    seen = {name(r): r.SerializeToString(deterministic=True) for r in page.rows}
    _render.set_output(args.output, wide=args.wide, no_headers=True)  # rows only from now on
    while True:
        time.sleep(WATCH_INTERVAL)
        changed = []
        for row in reversed(look().rows):  # oldest first, as they happened
            key, encoded = name(row), row.SerializeToString(deterministic=True)
            if seen.get(key) != encoded:
                seen[key] = encoded
                changed.append(row)
        if not changed:
            continue
        if args.json:
            for row in changed:
                print_item(record(row))
        else:
            _print(args, changed, kind=kind, name=name, render=render, record=record)
