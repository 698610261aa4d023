"""Lists in pages: the bound on a page (rows, and bytes well under gRPC's 4 MiB message limit) and
the opaque `page_token` that says where the next page starts. A token names its list, so one taken
from another list, or altered, is refused with one line rather than read as a position."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from google.protobuf.message import Message

#: the most rows one page holds, whatever the request asks
MAX_PAGE_ROWS = 1000
#: the most bytes of records one page holds (gRPC refuses messages over 4 MiB by default)
PAGE_BYTES = 1 << 20

M = TypeVar("M", bound=Message)


class PageTokenError(ValueError):
    """A page token that this list did not hand out."""


def page_size(asked: int, default: int) -> int:
    """The rows a page may hold: what was asked (else `default`), at most MAX_PAGE_ROWS."""
    return max(1, min(asked or default, MAX_PAGE_ROWS))


def encode(kind: str, position: Any) -> str:
    """The token of the page after `position` (a device id, a request seq, an offset) in list `kind`."""
    raw = json.dumps({"list": kind, "after": position}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(kind: str, token: str, shape: type) -> Any:
    """Where the page of `token` starts (None: no token, the first page)."""
    if not token:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        position = data["after"] if data.get("list") == kind else None
    except (ValueError, TypeError, KeyError, AttributeError):
        position = None
    if isinstance(position, int) and not isinstance(position, bool) and not 0 <= position < 2**63:
        position = None  # a crafted position no list hands out (a database would overflow on it)
    if isinstance(position, str) and "\x00" in position:
        position = None  # no id holds a NUL, and PostgreSQL refuses one in a query (not an answer)
    if not isinstance(position, shape) or isinstance(position, bool):
        raise PageTokenError(f"page_token {token[:40]!r} is not a token of this list; start without one")
    return position


def decode_newest(kind: str, token: str) -> tuple[datetime, str] | None:
    """Where a newest-first page of `token` starts: just after the row (created_at, id) it names
    (`newest_position`); None: no token, the first page."""
    position = decode(kind, token, list)
    if position is None:
        return None
    try:
        when, key = position
        created = datetime.fromisoformat(when)
    except (TypeError, ValueError):
        created, key = None, None
    if created is None or created.tzinfo is None or not isinstance(key, str) or "\x00" in key:
        raise PageTokenError(f"page_token {token[:40]!r} is not a token of this list; start without one")
    return created, key


def newest_position(created: datetime, key: str) -> list[str]:
    """The position `decode_newest` reads back: the last row shown, by its creation and its id."""
    return [created.isoformat(), key]


def fill(records: Sequence[M], budget: int = PAGE_BYTES) -> list[M]:
    """The records that fit in one page, in order (at least one: no record is near the limit)."""
    out: list[M] = []
    used = 0
    for record in records:
        size = record.ByteSize() + 8  # the field's tag and length
        if out and used + size > budget:
            break
        out.append(record)
        used += size
    return out
