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

A member whose text was unchanged last time is usually unchanged again (a tray's discovery: a
third of its state, and of the time its encoding took). For such a member the kept text comes with
a snapshot of its value, the SHA-256 of `marshal.dumps` of it: when the new value's snapshot is
the same, the kept text is its text and is not made again. Marshal's bytes are equal only for
values of the same exact
built-in types, equal at every node (`1`, `1.0` and `True` differ, a subclass is not taken), and
in the same order, so `json.dumps` would give the same text; a value changed in place since is
seen, as the snapshot is of the value, not of its identity. Making a snapshot is several times
cheaper than the text. A member that is a subclass of dict (a plugin's mark that a section was
checked, as the Redfish plugin's discovery) is taken as the plain dict of its items, which is
what `json.dumps` encodes, where neither the subclass nor its instances can change how `items`
is found; any other subclass gets no snapshot.
"""

from __future__ import annotations

import hashlib
import json
import marshal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.store import NO_STORED_STATE, StateChange, state_digest

#: members whose text is longer than this are kept as their digest only (bounds what a device
#: with an unusually large state costs in memory)
LONG_MEMBER = 32 * 1024

#: `json.dumps(value, sort_keys=True)` without making its encoder on each call
_ENCODE = json.JSONEncoder(sort_keys=True).encode


@dataclass(frozen=True, slots=True)
class StateText:
    """A state's JSON text, with the span of each top-level member's value in it."""

    text: str
    #: key -> (start, end) of its value's text; empty when the state has a key that is not a string
    spans: Mapping[str, tuple[int, int]]
    #: key -> its value's text (the text between its span)
    members: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    #: key -> the snapshot of a member whose text was unchanged (see the module docstring)
    snapshots: Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: long members' digests, made once (`change` compares them, `kept` keeps them)
    _digests: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def member(self, key: str) -> str | None:
        return self.members.get(key)

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
        for key, text in self.members.items():
            members[key] = self.long_member_digest(key) if len(text) > LONG_MEMBER else text
        return Kept(state_digest(self.text), members, self.snapshots)


@dataclass(frozen=True, slots=True)
class Kept:
    """What the runner keeps of a state text it stored: its digest, and each member's text (a
    long member's digest)."""

    digest: bytes
    members: Mapping[str, str | bytes]
    #: key -> the snapshot its kept text is the text of (only members whose text was unchanged)
    snapshots: Mapping[str, bytes] = field(default_factory=dict)


#: what is kept of a device that has no stored state (no row, or a row without one): a change
#: against it names every member, each "before" null, and the store takes it as given only while the
#: device still has none (`controller.store._state_changes._given`)
NO_STATE = Kept(NO_STORED_STATE, {})


def encode(state: Mapping[str, Any], prior: Kept | None = None) -> StateText:
    """`state` as `json.dumps(state, sort_keys=True)` gives it, with its members' spans; a member
    whose snapshot is the one `prior` kept with its text takes that text (the module docstring)."""
    if not all(type(key) is str for key in state):
        return StateText(_ENCODE(state), {})
    texts: Mapping[str, str | bytes] = prior.members if prior is not None else {}
    kept_snapshots: Mapping[str, bytes] = prior.snapshots if prior is not None else {}
    pieces = ["{"]
    spans: dict[str, tuple[int, int]] = {}
    members: dict[str, str] = {}
    snapshots: dict[str, bytes] = {}
    at = 1
    for key in sorted(state):
        value = state[key]
        before = texts.get(key)
        if type(before) is not str:  # none kept, or a long member's digest
            before = None
        kept_snapshot = kept_snapshots.get(key)
        if kept_snapshot is not None and before is not None and _snapshot(value) == kept_snapshot:
            text = before
            snapshots[key] = kept_snapshot
        else:
            text = _ENCODE(value)
            if text == before:  # unchanged: its snapshot may spare the next encoding
                snapshot = _snapshot(value)
                if snapshot is not None:
                    snapshots[key] = snapshot
        head = _head(key, at == 1)
        at += len(head)
        spans[key] = (at, at + len(text))
        members[key] = text
        at += len(text)
        pieces += (head, text)
    pieces.append("}")
    return StateText("".join(pieces), spans, members, snapshots)


def _snapshot(value: Any) -> bytes | None:
    """The SHA-256 of `marshal.dumps(value)` (a dict subclass's as the plain dict of its items), None
    where it takes no snapshot (any other subclass of a built-in type, an object of another type).
    The digest, not the bytes, is kept: a GB200 tray's discovery marshals to 5.5 KB, which at
    10,000 devices would keep 55 MB for a few microseconds each (the digest costs ~7 us of the
    ~30 us its text would)."""
    kind = type(value)
    if kind is not dict and issubclass(kind, dict):  # its type, as json's encoder checks it
        plain = _PLAIN_DICTS.get(kind)
        if plain is None:
            plain = _PLAIN_DICTS[kind] = _items_are_dicts(kind)
        if not plain:
            return None
        value = dict(value.items())  # the items json's encoder takes (it calls `items()`)
    try:
        return hashlib.sha256(marshal.dumps(value)).digest()
    except ValueError:
        return None


#: dict subclass -> whether its instances' `items` is dict's own (`_items_are_dicts`)
_PLAIN_DICTS: dict[type, bool] = {}


def _items_are_dicts(kind: type) -> bool:
    """Whether `items` on an instance of this dict subclass is surely `dict.items`: no class of it
    defines `items` or changes attribute lookup, and its instances have no `__dict__` of their own."""
    own = [vars(c) for c in kind.__mro__ if c is not dict and c is not object]
    return kind.__dictoffset__ == 0 and not any(
        "items" in names or "__getattribute__" in names or "__getattr__" in names for names in own
    )


#: (key, first) -> the text before a member's value, made once per key
_HEADS: dict[tuple[str, bool], str] = {}


def _head(key: str, first: bool) -> str:
    head = _HEADS.get((key, first))
    if head is None:
        head = ("" if first else ", ") + _ENCODE(key) + ": "
        if len(_HEADS) < 1024:  # a state's keys are few; odd ones are not kept
            _HEADS[(key, first)] = head
    return head


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
