"""Output for people (tables) and scripts (--json)."""

from __future__ import annotations

import base64
import json
import re
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
    return _json_fields(json_format.MessageToDict(message, preserving_proto_field_name=True))


def _json_fields(value: Any) -> Any:
    """Bytes fields holding JSON (`*_json`: state, model) as JSON, not protobuf's base64."""
    if isinstance(value, list):
        return [_json_fields(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key.endswith("_json") and isinstance(item, str):
            try:
                item = json.loads(base64.b64decode(item, validate=True))
            except ValueError:
                pass  # not JSON after all: leave protobuf's form
        out[key] = _json_fields(item)
    return out


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def short_id(value: str, wide: bool = False) -> str:
    """A UUID's first 8 characters in tables (`requests show` takes a unique prefix); --wide: all."""
    return value[:8] if not wide and _UUID.match(value) else value


def clip_cell(value: str, wide: bool = False, limit: int = 80) -> str:
    """A long cell (an error quoting a device) on one short line unless --wide."""
    value = " ".join(value.split())
    return value if wide or len(value) <= limit else value[: limit - 1] + "…"


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
