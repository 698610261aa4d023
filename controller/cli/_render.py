"""Output for people (tables) and scripts (--json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_json(value: Any) -> None:
    if isinstance(value, Message):
        value = as_dict(value)
    elif isinstance(value, list) and value and isinstance(value[0], Message):
        value = [as_dict(v) for v in value]
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    """JSON for values json does not know: datetimes as ISO text, enums by value, errors as text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "value"):
        return value.value
    return str(value)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    t = Table(title=title, title_justify="left")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    console.print(t)


def when(ts: Any) -> str:
    """A protobuf Timestamp as local-free ISO text, '' when unset."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return ""
    return str(ts.ToDatetime().isoformat(timespec="milliseconds")) + "Z"
