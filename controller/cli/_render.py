"""Output for people (tables) and scripts (`-o json`, `-o yaml`), and the one-line error."""

from __future__ import annotations

import base64
import csv
import json
import re
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from rich.console import Console
from rich.text import Text

# soft_wrap: a line is never broken at the width rich assumes (80 columns in a pipe)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)
#: the structured format `print_json` writes: "json" or "yaml" (`-o yaml`); set once per command line
_structured = "json"
#: `-o wide`: every column, nothing shortened
_wide = False
#: `-o csv`: tables as CSV (every column); `--no-headers`: no title or header line
_csv = False
_no_headers = False


def set_output(output: str, *, wide: bool = False, no_headers: bool = False) -> None:
    global _structured, _wide, _csv, _no_headers
    _structured = "yaml" if output == "yaml" else "json"
    _csv = output == "csv"
    _wide = wide or output in ("wide", "csv")
    _no_headers = no_headers


def is_wide() -> bool:
    return _wide


def print_error(message: str) -> None:
    """`error: MESSAGE` on one stderr line (no markup read from the message, no wrapping)."""
    err_console.print(Text.assemble(("error", "red"), f": {message}"), highlight=False, soft_wrap=True)


def as_dict(message: Message) -> dict[str, Any]:
    """A message as scripts want it: every field, zeros and empty ones included (optional fields
    only when set), 64-bit integers as numbers (protobuf's JSON quotes them), enums in lower case
    as tables and filters write them, and `*_json` bytes as JSON."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _json_fields(_typed(message.DESCRIPTOR, data))


_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def _typed(descriptor: Descriptor, data: dict[str, Any]) -> dict[str, Any]:
    for name, value in data.items():
        field = descriptor.fields_by_name.get(name)
        if field is not None:
            data[name] = _typed_field(field, value)
    return data


def _typed_field(field: FieldDescriptor, value: Any) -> Any:
    kind = field.message_type
    if kind is not None and kind.GetOptions().map_entry:
        return {k: _typed_value(kind.fields_by_name["value"], v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed_value(field, v) for v in value]
    return _typed_value(field, value)


def _typed_value(field: FieldDescriptor, value: Any) -> Any:
    if field.type in _INT64 and isinstance(value, str):
        return int(value)
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        return value.lower()
    kind = field.message_type
    if kind is not None and isinstance(value, dict) and not kind.full_name.startswith("google.protobuf."):
        return _typed(kind, value)
    return value


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
    """A long cell (an error quoting a device) on one short line at a terminal unless --wide; into
    a pipe it is written whole, like the rest of the row."""
    value = " ".join(value.split())
    keep = wide or _wide or not console.is_terminal
    return value if keep or len(value) <= limit else value[: limit - 1] + "…"


def print_json(value: Any) -> None:
    """The structured output of a command: JSON, or YAML with `-o yaml`."""
    if isinstance(value, Message):
        value = as_dict(value)
    elif isinstance(value, list) and value and isinstance(value[0], Message):
        value = [as_dict(v) for v in value]
    text = json.dumps(value, indent=2, sort_keys=True, default=_plain)
    sys.stdout.write(to_yaml(json.loads(text)) if _structured == "yaml" else text + "\n")


def print_item(value: Any) -> None:
    """One item of a stream as it arrives: a JSON line, or a YAML document with `-o yaml`."""
    text = json.dumps(value, sort_keys=True, default=_plain)
    sys.stdout.write("---\n" + to_yaml(json.loads(text)) if _structured == "yaml" else text + "\n")
    sys.stdout.flush()


def to_yaml(value: Any) -> str:
    """Block-style YAML for JSON values (scalars in JSON's notation, which YAML reads as is)."""
    return "\n".join(_yaml_lines(value, 0)) + "\n"


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_YAML_WORDS = {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"}


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) and key.lower() not in _YAML_WORDS else json.dumps(key)


def _yaml_scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # {} and [] too: flow style for empty ones


def _yaml_lines(value: Any, pad: int) -> list[str]:
    indent = " " * pad
    if isinstance(value, dict) and value:
        out = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                out.append(f"{indent}{_yaml_key(str(key))}:")
                out.extend(_yaml_lines(item, pad + 2))
            else:
                out.append(f"{indent}{_yaml_key(str(key))}: {_yaml_scalar(item)}")
        return out
    if isinstance(value, list) and value:
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                first, *rest = _yaml_lines(item, pad + 2)
                out.append(f"{indent}- {first.lstrip()}")
                out.extend(rest)
            else:
                out.append(f"{indent}- {_yaml_scalar(item)}")
        return out
    return [indent + _yaml_scalar(value)]


def _plain(value: Any) -> Any:
    """JSON for values json does not know: datetimes as ISO text, enums by value, errors as text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "value"):
        return value.value
    return str(value)


def table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    wide_columns: Sequence[str] = (),
    cut_first: Sequence[str] = (),
) -> None:
    """Plain columns, one line per row, never wrapped: in a terminal each line is cut to its width
    (the `cut_first` columns, then the last ones, shortened with "…"), in a pipe rows are written
    whole; no box drawing anywhere. `wide_columns` appear only with `-o wide`, which also cuts
    nothing; `cut_first` are free text (an error) or long names, shortened before the others."""
    if console.quiet:  # a command printing only JSON silenced the console: tables too
        return
    keep = [i for i, c in enumerate(columns) if _wide or c not in wide_columns]
    header = [str(columns[i]) for i in keep]
    cells = [[_cell(row[i]) for i in keep] for row in rows]
    if _csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerows(cells if _no_headers else [header, *cells])
        sys.stdout.flush()
        return
    widths = [max([len(h), *(len(r[j]) for r in cells)]) for j, h in enumerate(header)]
    limit = console.width if console.is_terminal and not _wide else None
    if limit is not None:
        first = [j for j in reversed(range(len(header))) if header[j] in cut_first]
        order = first + [j for j in reversed(range(len(header))) if j not in first]
        widths = _fit(widths, [len(h) for h in header], limit, order)
    lines = [_line(r, widths) for r in cells]
    if not _no_headers:
        lines.insert(0, _line(header, widths))
        if title:
            lines.insert(0, title)
    if limit is not None:
        lines = [_cut(line, limit) for line in lines]
    if lines:  # --no-headers and no rows: nothing at all
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _cell(value: Any) -> str:
    return "" if value is None else " ".join(str(value).split())


def _fit(widths: list[int], floors: list[int], limit: int, order: Sequence[int]) -> list[int]:
    """Shrink columns in `order`, each down to a floor of its header's width, until the line fits
    `limit`."""
    widths = list(widths)
    floors = [max(min(f, 12), 4) for f in floors]
    excess = sum(widths) + 2 * (len(widths) - 1) - limit
    for j in order:
        if excess <= 0:
            break
        cut = min(excess, max(widths[j] - floors[j], 0))
        widths[j] -= cut
        excess -= cut
    return widths  # still too wide: each line is cut at the end


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(_cut(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def when(ts: Any) -> str:
    """A protobuf Timestamp as local-free ISO text, '' when unset."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return ""
    return str(ts.ToDatetime().isoformat(timespec="milliseconds")) + "Z"


def when_short(ts: Any) -> str:
    """A protobuf Timestamp for narrow tables (UTC): `HH:MM:SS` today, `MM-DD HH:MM` before;
    '' when unset. `-o wide` shows the full time."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return ""
    at = ts.ToDatetime()
    today = datetime.now(UTC).date()
    return str(at.strftime("%H:%M:%S" if at.date() == today else "%m-%d %H:%M"))
