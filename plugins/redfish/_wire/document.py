"""A Redfish resource as read: the one value the client, the read-back cache and discovery share;
and JSON read within bounds (`loads`, `past_bound`, `too_deep`, `whole_json`; `loads_scanned` for a
reply the transport scanned already)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: the deepest nesting of objects and arrays read (Redfish resources nest a dozen levels at most);
#: Python's parser would raise `RecursionError` somewhere near 1000, and code walking a document
#: (copies, `json.dumps` of a read-back) near the same depth
MAX_NESTING = 64
#: the most objects and arrays in one reply (a collection of thousands of members holds tens of
#: thousands); with the body's byte bound it bounds what parsing a reply costs: 8 MiB of `[{},…]`
#: or of nested arrays would be millions of objects, parsed on the event loop
MAX_CONTAINERS = 200_000
#: the most values in one reply's arrays and objects, told by their commas (those in strings too)
MAX_VALUES = 1_000_000

#: every opening bracket as `(`, every closing one as `)`
_PARENS = bytes.maketrans(b"[{]}", b"(())")
#: every byte but brackets and quotes
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'[]{}"'))


#: the scanner `json.loads` uses (`json.decoder.JSONDecoder().scan_once`, C where CPython has it)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


class JsonOverBound(ValueError):
    """JSON past one of the bounds (a `ValueError`, as invalid JSON is): `bound` names it,
    `limit` is its value."""

    def __init__(self, bound: str, limit: int, what: str) -> None:
        super().__init__(f"{what} (bound {bound} = {limit})")
        self.bound = bound
        self.limit = limit


def past_bound(body: bytes) -> JsonOverBound | None:
    """What bound the JSON text `body` is past (`MAX_VALUES`, `MAX_CONTAINERS`, `MAX_NESTING`), if
    any: its commas and brackets counted (those in strings too: a bound, not a parse), then its
    nesting measured. A body of at most `MAX_VALUES` bytes cannot hold more commas: nearly every
    reply is not scanned for them."""
    if len(body) > MAX_VALUES and body.count(b",") > MAX_VALUES:
        return JsonOverBound("JSON values", MAX_VALUES, f"JSON of over {MAX_VALUES} values")
    containers = body.count(b"[") + body.count(b"{")
    if containers <= MAX_NESTING:  # nearly every reply: three scans
        return None
    if containers > MAX_CONTAINERS:
        return JsonOverBound(
            "JSON containers", MAX_CONTAINERS, f"JSON of over {MAX_CONTAINERS} objects and arrays"
        )
    if too_deep(body):
        return JsonOverBound("nesting depth", MAX_NESTING, f"JSON nested deeper than {MAX_NESTING} levels")
    return None


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
    brackets = b"".join(structure.split(b'"')[::2]).translate(_PARENS)  # what is between strings
    for _ in range(limit):
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):  # no pair left to remove
            break
        brackets = shorter
    return b"()" in brackets or brackets.count(b"(") > limit


def loads(body: bytes | str, *, yielding: bool = False) -> Any:
    """`json.loads` within the bounds: `JsonOverBound` past one, `ValueError` for invalid JSON;
    never `RecursionError`. `yielding`: with a Python frame per object (`_object`), where the
    interpreter may hand the GIL to another thread (for a large body parsed off the event loop)."""
    over = past_bound(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body)
    if over is not None:
        raise over
    try:
        return json.loads(body, object_pairs_hook=_object) if yielding else json.loads(body)
    except RecursionError:  # deep nesting the bracket count missed (it cannot; kept as a guard)
        raise JsonOverBound("nesting depth", MAX_NESTING, "JSON nested too deep") from None


def loads_scanned(text: str, *, yielding: bool = False) -> Any:
    """`json.loads` of a reply's text whose bytes `past_bound` passed as they came (the transport
    scans each reply once, `BmcTransport.exchange`): neither scanned again nor re-encoded for a
    scan; `ValueError` for invalid JSON, never `RecursionError`. `yielding`: as `loads`."""
    try:
        if yielding:
            return json.loads(text, object_pairs_hook=_object)
        try:
            # NOTE: `json.loads`'s own scanner, called as `json.loads` calls it, without the
            # whitespace matches around it (a reply is one JSON value, from its first character
            # to its last): anything else (whitespace, a BOM, more after the value) is left to
            # `json.loads`, which reads it as it always does
            value, end = _SCAN(text, 0)
        except StopIteration:
            return json.loads(text)
        return value if end == len(text) else json.loads(text)
    except RecursionError:  # deep nesting the transport's scan missed (it cannot; kept as a guard)
        raise JsonOverBound("nesting depth", MAX_NESTING, "JSON nested too deep") from None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of a large body's JSON, built in Python: the C parser alone never lets another
    thread (the event loop's) run until it is done."""
    return dict(pairs)


def whole_json(body: bytes) -> bool:
    """Whether `body` is one complete JSON object or array (its closing bracket proves its end; a
    number or a literal cut short still parses)."""
    text = body.strip()
    if not text or text[:1] not in (b"{", b"["):
        return False
    try:
        loads(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, init=False)
class Document:
    """A resource as read: its JSON body and its ETag (header, else `@odata.etag`)."""

    path: str
    body: Mapping[str, Any]
    etag: str | None = None

    def __init__(self, path: str, body: Mapping[str, Any], etag: str | None = None) -> None:
        # NOTE: the fields written straight into the instance's dict: a frozen dataclass's own
        # `__init__` sets each through `object.__setattr__`, twice the cost (one per GET)
        fields = self.__dict__
        fields["path"] = path
        fields["body"] = body
        fields["etag"] = etag

    def get(self, key: str, default: Any = None) -> Any:
        """Shortcut for `body.get`."""
        return self.body.get(key, default)
