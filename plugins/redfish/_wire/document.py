"""A Redfish resource as read: the one value the client, the read-back cache and discovery share;
and JSON read within a nesting bound (`loads`, `too_deep`, `whole_json`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the deepest nesting of objects and arrays read (Redfish resources nest a dozen levels at most);
#: Python's parser would raise `RecursionError` somewhere near 1000, and code walking a document
#: (copies, `json.dumps` of a read-back) near the same depth
MAX_NESTING = 64

#: a JSON string once escapes are gone and only quotes and brackets are left
_STRING = re.compile(rb'"[^"]*"')
#: every opening bracket as `(`, every closing one as `)`
_PARENS = bytes.maketrans(b"[{]}", b"(())")
#: every byte but brackets and quotes
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'[]{}"'))


class NestingTooDeep(ValueError):
    """JSON nested deeper than `limit` levels (a `ValueError`, as invalid JSON is)."""

    bound = "nesting depth"

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels (bound nesting depth = {limit})")
        self.limit = limit


def too_deep(body: bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the JSON text `body` nests objects and arrays deeper than `limit`, told without
    recursion in at most `limit` linear passes in C: with strings taken out, each pass removes
    every innermost bracket pair, which lowers the deepest nesting by exactly one. What no pass
    removes is unbalanced (invalid JSON): more than `limit` brackets left open count as too deep
    too (a parser would recurse into each before it failed)."""
    if body.count(b"[") + body.count(b"{") <= limit:  # nearly every reply: two scans
        return False
    # escapes go first (a run of backslashes pairs up from its left, as JSON reads it), then all
    # but quotes and brackets, then the strings: each step one pass in C
    structure = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    brackets = _STRING.sub(b"", structure).translate(_PARENS)
    for _ in range(limit):
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):  # no pair left to remove
            break
        brackets = shorter
    return b"()" in brackets or brackets.count(b"(") > limit


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
