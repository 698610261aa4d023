"""A Redfish resource as read: the one value the client, the read-back cache and discovery share;
and JSON read within a nesting bound (`loads`, `too_deep`, `whole_json`)."""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

#: the deepest nesting of objects and arrays read (Redfish resources nest a dozen levels at most);
#: Python's parser would raise `RecursionError` somewhere near 1000, and code walking a document
#: (copies, `json.dumps` of a read-back) near the same depth
MAX_NESTING = 64

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
#: an opening bracket is one level up (1), a closing one a level down (255: -1 as a signed byte)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class NestingTooDeep(ValueError):
    """JSON nested deeper than `limit` levels (a `ValueError`, as invalid JSON is)."""

    bound = "nesting depth"

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels (bound nesting depth = {limit})")
        self.limit = limit


def too_deep(body: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text `body` nests objects and arrays deeper than `limit`: one linear pass,
    in C but for a sum over the brackets left once strings are taken out (no recursion)."""
    if body.count(b"[") + body.count(b"{") <= limit:  # nearly every reply: a few C scans
        return False
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", body))
    return max(accumulate(array("b", brackets.translate(_STEPS))), default=0) > limit


def loads(body: bytes | str, limit: int = MAX_NESTING) -> Any:
    """`json.loads` within the nesting bound: `NestingTooDeep` past it, `ValueError` for invalid
    JSON; never `RecursionError`."""
    if too_deep(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body, limit):
        raise NestingTooDeep(limit)
    try:
        return json.loads(body)
    except RecursionError:  # deep nesting the bracket count missed (it cannot; kept as a guard)
        raise NestingTooDeep(limit) from None


def whole_json(body: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether `body` is one complete JSON object or array (its closing bracket proves its end; a
    number or a literal cut short still parses)."""
    text = body.strip()
    if not text or text[:1] not in (b"{", b"["):
        return False
    try:
        loads(text, limit)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Document:
    """A resource as read: its JSON body and its ETag (header, else `@odata.etag`)."""

    path: str
    body: Mapping[str, Any]
    etag: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """Shortcut for `body.get`."""
        return self.body.get(key, default)
