"""A device state as the JSON text the store keeps, and its change against the stored one.

The runner serialises each new state once (`json.dumps(state, sort_keys=True)`), one top-level
member at a time, and remembers where each member's text lies in it. Against what it kept of the
text this process last stored for the device (`Kept`), the members whose text differs are the
change, and its audit summary (`{key: {"before": ..., "after": ...}}`, as `state_diff` makes it)
is cut out of the two texts. The store takes that change as given only while the stored text is
exactly the one it was computed against (its digest, `StateChange.prior_digest`); otherwise, and
on PostgreSQL, it parses both states and compares them itself. Parsing both states and serialising
the summary again on the store's writer thread, for every completion, showed in the fan-out's
profile.

A member changes when its text does: `1`, `1.0` and `true` are equal in Python but distinct JSON,
and each is stored as given (a version and an audit row); the store's own comparison decides the
same way (`controller.store._state_changes._differ`), so both paths agree on every sequence.

What is kept per device: the text's digest, each member's text, and the digest only of a member
longer than `LONG_MEMBER` (when one of those changes, its old text is not at hand, and the store
computes that change). A Redfish state's members are a few KiB each (a GB200 tray's: discovery
6 KiB, readings 7.5 KiB, 18 KiB in all), and its readings change with every cap: with the bound
at 2 KiB every activation's change fell back to the store, which parsed both states and
serialised their difference on its writer thread (about 5% of a steady-state wave's CPU, the
fan-out benchmark's profile). The texts kept are a fraction of the state the resolver keeps per
device anyway (`controller.execution.resolve`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.store import StateChange, state_digest

#: members whose text is longer than this are kept as their digest only (bounds what a device
#: with an unusually large state costs in memory)
LONG_MEMBER = 32 * 1024


@dataclass(frozen=True, slots=True)
class StateText:
    """A state's JSON text, with the span of each top-level member's value in it."""

    text: str
    #: key -> (start, end) of its value's text; empty when the state has a key that is not a string
    spans: Mapping[str, tuple[int, int]]
    #: long members' digests, made once (`change` compares them, `kept` keeps them)
    _digests: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def member(self, key: str) -> str | None:
        span = self.spans.get(key)
        return None if span is None else self.text[span[0] : span[1]]

    def long_member_digest(self, key: str) -> bytes:
        digest = self._digests.get(key)
        if digest is None:
            start, end = self.spans[key]
            digest = self._digests[key] = state_digest(self.text[start:end])
        return digest

    def kept(self) -> Kept | None:
        """What to keep of this text to cut the next change from (None: its members are unknown)."""
        if not _cut(self):
            return None
        members: dict[str, str | bytes] = {}
        for key, (start, end) in self.spans.items():
            long = end - start > LONG_MEMBER
            members[key] = self.long_member_digest(key) if long else self.text[start:end]
        return Kept(state_digest(self.text), members)


@dataclass(frozen=True, slots=True)
class Kept:
    """What the runner keeps of a state text it stored: its digest, and each member's text (a
    long member's digest)."""

    digest: bytes
    members: Mapping[str, str | bytes]


def encode(state: Mapping[str, Any]) -> StateText:
    """`state` as `json.dumps(state, sort_keys=True)` gives it, with its members' spans."""
    if not all(type(key) is str for key in state):
        return StateText(json.dumps(state, sort_keys=True), {})
    pieces = ["{"]
    spans: dict[str, tuple[int, int]] = {}
    at = 1
    for key in sorted(state):
        head = json.dumps(key) + ": " if at == 1 else ", " + json.dumps(key) + ": "
        value = json.dumps(state[key], sort_keys=True)
        at += len(head)
        spans[key] = (at, at + len(value))
        at += len(value)
        pieces += (head, value)
    pieces.append("}")
    return StateText("".join(pieces), spans)


def change(prior: Kept | None, new: StateText | None) -> StateChange | None:
    """The change from `prior` (kept of the stored state's text) to `new`, or None where it cannot
    be cut from the texts: either unknown, a state with a key that is not a string, or a long
    member changed (its old text is not kept)."""
    if prior is None or new is None or not _cut(new):
        return None
    members = []
    for key in sorted(prior.members.keys() | new.spans.keys()):
        before, after = prior.members.get(key), new.member(key)
        if isinstance(before, bytes):
            if after is not None and new.long_member_digest(key) == before:
                continue
            return None
        if before != after:
            members.append(f'{json.dumps(key)}: {{"before": {before or "null"}, "after": {after or "null"}}}')
    return StateChange(prior.digest, "{" + ", ".join(members) + "}")


def _cut(text: StateText) -> bool:
    """Whether the text's members are known (every key a string; `{}` has none)."""
    return bool(text.spans) or text.text == "{}"
