"""The controller's own last read-back of each resource on one BMC, standing in for the next
pre-write GET of that resource while it is still valid (docs/redfish.md, "Read-backs as priors").

It lives in the per-BMC `BmcClient`, which the controller keeps alive between requests like the
Redfish session and the discovery cache; nothing of it is persisted, so a restarted controller (or
one that takes a shard over) starts empty and reads afresh. Its rules:

- filled only by a read-back: the first successful GET of a URI after a write to it sent by this
  client; a later GET of a cached URI replaces the entry (a newer reading);
- dropped for a URI when a write to it is sent (before sending), and for every URI on any failed
  request to the BMC and on a new login (a BMC that fails or lost our session may have rebooted);
- used only where the caller offers it (`priors_from_read_backs`): the pre-write read of a cap
  change whose cached value is not already the target. Restores, verifications, drift checks and
  metrics always read the BMC;
- valid for `max_age` seconds after it was read (0: never used). Where the write carries
  `If-Match` (real ETags, the `strong` policy), the ETag of the read-back goes with it and the BMC
  checks that the resource is still as read: a 412 makes the write path read it again, and that
  fresh reading, not the stale read-back, is the prior recorded (`Priors.fresh`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from plugins.redfish._wire.document import Document, loads_scanned


@dataclass
class Priors:
    """One operation's use of read-backs as priors (shared by the tasks it starts).

    Attributes:
        offered: URI -> when the read-back that may answer a GET of it was read (it is parsed
            again then, if it is still the one kept: holding 8 parsed bodies per activation in
            flight, for the whole activation, showed in the fleet's peak memory).
        served: those a read-back did answer.
        refused: those whose write then failed its `If-Match` (412): the read-back was stale.
        fresh: for those, the first GET after the refusal: the value truly in force before.
    """

    offered: dict[str, float]
    #: URI -> the offered read-back as the caller parsed it to decide on the offer, given to the
    #: first GET of it (not parsed a second time), then dropped
    parsed: dict[str, Document] = field(default_factory=dict)
    served: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    fresh: dict[str, Document] = field(default_factory=dict)


#: per task: concurrent operations on other devices behind the same BMC are not affected
_PRIORS: ContextVar[Priors | None] = ContextVar("redfish_read_back_priors", default=None)


@contextlib.contextmanager
def priors_from_read_backs(
    offered: Mapping[str, float], parsed: Mapping[str, Document] | None = None
) -> Iterator[Priors]:
    """Let GETs of the URIs `offered` (`ReadBacks.peek` results) inside the block, and in tasks
    started from it, be answered by those read-backs while they are still the valid ones
    (`parsed`: the ones `peek` parsed, handed to the GET that uses them)."""
    priors = Priors(dict(offered), dict(parsed or {}))
    token = _PRIORS.set(priors)
    try:
        yield priors
    finally:
        _PRIORS.reset(token)


def offered(path: str) -> float | None:
    """When the read-back the current context offers for a GET of `path` was read, if any."""
    priors = _PRIORS.get()
    return priors.offered.get(path) if priors is not None else None


def take_parsed(path: str) -> Document | None:
    """The offered read-back of `path` as already parsed, if the context holds it (once)."""
    priors = _PRIORS.get()
    return priors.parsed.pop(path, None) if priors is not None else None


def note_served(path: str) -> None:
    """A read-back answered a GET of `path` in this context."""
    priors = _PRIORS.get()
    if priors is not None:
        priors.served.add(path)


def note_refused(path: str) -> None:
    """A write to `path` failed its `If-Match`: a read-back served for it was stale."""
    priors = _PRIORS.get()
    if priors is not None and path in priors.served:
        priors.refused.add(path)


def note_read(path: str, doc: Document) -> None:
    """A GET of `path` answered `doc` from the BMC (kept when it corrects a stale read-back)."""
    priors = _PRIORS.get()
    if priors is not None and path in priors.refused and path not in priors.fresh:
        priors.fresh[path] = doc


class ReadBacks:
    """One BMC's read-backs by URI (see the module docstring)."""

    __slots__ = ("_after_write", "_entries", "_epoch", "hits", "max_age")

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        #: URI -> (the reply's bytes, its ETag, monotonic time it was read). The bytes, not the
        #: parsed body: a few per component over a whole fleet, and a parsed body takes 3-4 times
        #: the memory; parsing again on use costs a fraction of the GET it saves.
        self._entries: dict[str, tuple[bytes, str | None, float]] = {}
        #: URI -> writes sent to it whose read-back has not come yet
        self._after_write: dict[str, int] = {}
        #: bumped when everything is dropped: a GET in flight across it fills nothing
        self._epoch = 0
        #: GETs answered from here (for tests and the debug log)
        self.hits = 0

    def still(self, path: str, read_at: float, parsed: Document | None = None) -> Document | None:
        """The read-back of `path` read at `read_at` (as `peek` gave it), parsed (`parsed`: as
        `peek` gave it), if it is still the one kept and fresh enough (counted as a hit); else None."""
        entry = self._entries.get(path)
        if entry is None or entry[2] != read_at or time.monotonic() - read_at > self.max_age:
            return None
        self.hits += 1
        return parsed if parsed is not None else _document(path, entry)

    def peek(self, path: str) -> tuple[Document, float] | None:
        """The read-back of `path` (parsed) and when it was read, if one would be used now."""
        entry = self._entries.get(path)
        if entry is None or time.monotonic() - entry[2] > self.max_age:
            return None
        return _document(path, entry), entry[2]

    def writing(self, path: str) -> None:
        """A write to `path` is about to be sent: its read-back is no longer the resource's state."""
        self._entries.pop(path, None)
        self._after_write[path] = self._after_write.get(path, 0) + 1

    def ticket(self, path: str) -> tuple[int, int]:
        """Taken before a GET of `path` is sent; given back to `read` with its document."""
        return self._epoch, self._after_write.get(path, 0)

    def read(self, path: str, ticket: tuple[int, int], doc: Document, raw: bytes) -> None:
        """A GET of `path` answered `doc` (`raw`: the reply's bytes): keep it if it is a read-back
        (or replaces one) and nothing was written to `path`, nor failed, while it was in flight."""
        if self.max_age <= 0 or ticket != self.ticket(path):
            return
        if ticket[1]:
            del self._after_write[path]
        elif path not in self._entries:
            return  # an ordinary read of a resource we have not written
        self._entries[path] = (raw, doc.etag, time.monotonic())

    def clear(self) -> None:
        """Drop everything (a failed request, a new login)."""
        self._entries.clear()
        self._after_write.clear()
        self._epoch += 1

    def __len__(self) -> int:
        return len(self._entries)


def _document(path: str, entry: tuple[bytes, str | None, float]) -> Document:
    # `json.loads(raw)` as it reads bytes (decoded as `json.detect_encoding` says), parsed without
    # its whitespace matches: these bytes were bounds-scanned when their GET's reply came
    raw = entry[0]
    return Document(path, loads_scanned(raw.decode(json.detect_encoding(raw), "surrogatepass")), entry[1])
