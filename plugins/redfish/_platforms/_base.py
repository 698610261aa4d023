"""What every cap mechanism provides: a parsed reading and the requests that change it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from plugins.base import plain_init
from plugins.redfish._discovery.layout import Component
from plugins.redfish._wire.document import Document

#: how deep the properties a write may name are recorded (`WriteEvidence.shown`)
EVIDENCE_DEPTH = 6
#: at most this many property paths and actions are recorded per resource (a bound on the state)
EVIDENCE_ITEMS = 512
#: distinct sets of property paths kept to be shared (`shared_paths`): a fleet's limit resources
#: show a few sets between them; past this many the table starts over
SHARED_PATH_SETS = 1024
#: characters a set of paths may have in all to be kept for sharing (a GB200 GPU's limit shows 7
#: paths of 170 in all, a CPU's 13 of 328): the table then holds at most about 2 million characters
#: of paths, whatever a BMC sends (a reply of up to `max_document_bytes` may name 512 long keys)
SHARED_PATH_CHARS = 2048

#: a set of property paths -> the one instance of it evidence holds
_PATH_SETS: dict[frozenset[str], frozenset[str]] = {}


def shared_paths(paths: frozenset[str]) -> frozenset[str]:
    """The one kept instance of a set equal to `paths` (it, the first time): every reading of a
    fleet's GPU limits shows the same paths, and each reading kept in a device's state held its
    own copies of the strings (at 1,000 GB200 BMCs, 6.5 MiB after a wave and 13 MiB at its peak,
    `tracemalloc`). A frozenset of strings cannot change, so sharing it changes nothing else. A set
    longer than `SHARED_PATH_CHARS` is not kept: the table outlives the readings that filled it."""
    kept = _PATH_SETS.get(paths)
    if kept is None:
        if sum(map(len, paths)) > SHARED_PATH_CHARS:
            return paths
        if len(_PATH_SETS) >= SHARED_PATH_SETS:
            _PATH_SETS.clear()
        kept = _PATH_SETS[paths] = paths
    return kept


@dataclass(frozen=True)
class ActionEvidence:
    """One action the limit resource lists under `Actions` that the mechanism may POST.

    Attributes:
        name: the action's key (`#Control.ResetToDefaults`, `#NvidiaEnvironmentMetrics.ClearOOBSetPoint`).
        target: its `target`.
        parameters: `<Parameter>@Redfish.AllowableValues` the entry publishes, by parameter.
        info: its `@Redfish.ActionInfo` URI ('' when none).
    """

    name: str
    target: str
    parameters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    info: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON for the device state."""
        return {
            "name": self.name,
            "target": self.target,
            "parameters": dict(self.parameters),
            "info": self.info,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ActionEvidence:
        """Parse `to_json` (already checked by the state schema)."""
        params = data.get("parameters") or {}
        return cls(
            str(data.get("name") or ""),
            str(data.get("target") or ""),
            {str(k): tuple(str(v) for v in vs) for k, vs in params.items()},
            str(data.get("info") or ""),
        )


@dataclass(frozen=True)
class WriteEvidence:
    """What the limit resource's GET showed that the write gate judges a write on: the same whether
    the GET was just made or a stored reading stands in for it (`plugins.redfish._platforms.gate`).

    Attributes:
        path: the resource read.
        refused: why that GET did not carry the limit ('' when it did: `Mechanism.offers`).
        shown: the property paths it showed (`PowerLimitWatts/SetPoint`, `PowerControl/0/PowerLimit`)
            under the properties the mechanism writes (`Mechanism.writes`).
        allowable: `<property>@Redfish.AllowableValues` shown there, by property path.
        actions: the actions of the mechanism (`Mechanism.actions`) the resource lists, by target.
    """

    path: str
    refused: str = ""
    shown: frozenset[str] = frozenset()
    allowable: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    actions: Mapping[str, ActionEvidence] = field(default_factory=dict)

    @classmethod
    def of(cls, mech: Mechanism, refused: str, doc: Document) -> WriteEvidence:
        """The evidence a GET of the limit resource shows for `mech` (built on every read of a
        limit, read-backs included: kept to plain loops, dict and list told by their type first)."""
        shown: set[str] = set()
        allowable: dict[str, tuple[str, ...]] = {}
        body = doc.body
        if body.__class__ is not dict and not isinstance(body, Mapping):
            body = {}
        top = {k: body[k] for k in mech.writes if k in body}
        # NOTE: walked without the bound's checks first; only a walk that came near the bound (or
        # met a key or node JSON never gives) is walked again with them, so the result is the same
        if not _walk(top, "", 1, shown, allowable) or len(shown) >= EVIDENCE_ITEMS:
            shown.clear()
            allowable.clear()
            _record(top, "", 1, shown, allowable)
        for key in mech.writes:
            values = body.get(key + _ALLOWABLE)
            if values is not None and isinstance(values, list) and key in body:
                allowable[key] = tuple(str(v) for v in values[:EVIDENCE_ITEMS])
        actions: dict[str, ActionEvidence] = {}
        listed = body.get("Actions")
        if listed is not None and mech.actions and isinstance(listed, Mapping):
            entries: list[tuple[str, Mapping[str, Any]]] = []
            _action_entries(listed, entries)
            for name, entry in entries:
                if name in mech.actions and len(actions) < EVIDENCE_ITEMS:
                    target = str(entry["target"]).rstrip("/")
                    params = {
                        k.split("@", 1)[0]: tuple(str(v) for v in vs[:EVIDENCE_ITEMS])
                        for k, vs in entry.items()
                        if k.endswith(_ALLOWABLE) and isinstance(vs, list)
                    }
                    info = entry.get("@Redfish.ActionInfo")
                    # NOTE: fields set as `__init__` sets them (a frozen dataclass's costs as much
                    # again as the rest of an action's evidence)
                    action = object.__new__(ActionEvidence)
                    info = info if isinstance(info, str) else ""
                    action.__dict__.update(name=name, target=target, parameters=params, info=info)
                    actions[target] = action
        evidence = object.__new__(cls)
        evidence.__dict__.update(
            path=doc.path.rstrip("/"),
            refused=refused,
            shown=shared_paths(frozenset(shown)),
            allowable=allowable,
            actions=actions,
        )
        return evidence

    def to_json(self) -> dict[str, Any]:
        """JSON for the device state (the stored reading's evidence)."""
        return {
            "path": self.path,
            "refused": self.refused,
            "shown": sorted(self.shown),
            "allowable": {k: list(v) for k, v in self.allowable.items()},
            "actions": [a.to_json() for a in self.actions.values()],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WriteEvidence:
        """Parse `to_json` (already checked by the state schema)."""
        actions = [ActionEvidence.from_json(a) for a in data.get("actions") or ()]
        return cls(
            str(data.get("path") or ""),
            str(data.get("refused") or ""),
            shared_paths(frozenset(str(p) for p in data.get("shown") or ())),
            {str(k): tuple(str(v) for v in vs) for k, vs in (data.get("allowable") or {}).items()},
            {a.target: a for a in actions},
        )


#: the annotation a property's allowed values come in
_ALLOWABLE = "@Redfish.AllowableValues"
#: JSON's scalar types: nothing under them to record (told by type before any `isinstance`)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _record(
    node: Mapping[str, Any], prefix: str, depth: int, shown: set[str], allowable: dict[str, tuple[str, ...]]
) -> None:
    """Property paths and AllowableValues annotations of `node` (see `WriteEvidence`)."""
    deeper = depth < EVIDENCE_DEPTH
    for key, value in node.items():
        if len(shown) >= EVIDENCE_ITEMS or not isinstance(key, str):
            return
        if "@" in key:
            _annotation(node, key, value, prefix, allowable)
            continue
        where = prefix + key
        shown.add(where)
        if not deeper or value.__class__ in _SCALARS:
            continue
        if isinstance(value, Mapping):
            _record(value, where + "/", depth + 1, shown, allowable)
        elif isinstance(value, list):
            members = {str(i): m for i, m in enumerate(value[:EVIDENCE_ITEMS]) if isinstance(m, Mapping)}
            _record(members, where + "/", depth + 1, shown, allowable)


def _annotation(
    node: Mapping[str, Any], key: str, value: Any, prefix: str, allowable: dict[str, tuple[str, ...]]
) -> None:
    """An annotation key of `node`: a property's AllowableValues, kept (`_record`, `_walk`)."""
    name, _, annotation = key.partition("@")
    if annotation == "Redfish.AllowableValues" and name in node and isinstance(value, list):
        allowable[prefix + name] = tuple(str(v) for v in value[:EVIDENCE_ITEMS])


def _walk(
    node: Mapping[str, Any], prefix: str, depth: int, shown: set[str], allowable: dict[str, tuple[str, ...]]
) -> bool:
    """`_record` for JSON as parsed (str keys, dict and list nodes) without the bound on paths:
    False where it met anything else (then `_record` decides)."""
    deeper = depth < EVIDENCE_DEPTH
    for key, value in node.items():
        if key.__class__ is not str:
            return False
        if "@" in key:
            _annotation(node, key, value, prefix, allowable)
            continue
        where = prefix + key
        shown.add(where)
        if deeper:
            kind = value.__class__
            if kind is dict:
                if not _walk(value, where + "/", depth + 1, shown, allowable):
                    return False
            elif kind is list:
                members = {str(i): m for i, m in enumerate(value[:EVIDENCE_ITEMS]) if isinstance(m, Mapping)}
                if not _walk(members, where + "/", depth + 1, shown, allowable):
                    return False
            elif kind not in _SCALARS:
                return False
    return True


def _action_entries(node: Mapping[str, Any], out: list[tuple[str, Mapping[str, Any]]]) -> None:
    """Every `#Name: {"target": …}` entry under `Actions` (standard and OEM), into `out` in the
    order met (a list, not a generator per level)."""
    for key, value in node.items():
        if isinstance(value, Mapping):
            if isinstance(value.get("target"), str) and str(key).startswith("#"):
                out.append((str(key), value))
            else:
                _action_entries(value, out)


@plain_init  # a reading is made on every read of a limit, read-backs included
@dataclass(frozen=True)
class LimitReading:
    """One component's cap as the BMC reports it.

    Attributes:
        watts: the set point in force (None: no cap at all).
        capped: whether an explicit (out-of-band) cap is in force, as opposed to the BMC default.
        min_watts / max_watts: the BMC's `AllowableMin` / `AllowableMax`, when published.
        default_watts: `DefaultSetPoint`, when published.
        increment: the smallest step (`Increment`), when published.
        units: `W` (or the BMC's spelling of it) or `%`.
        mode: `ControlMode`, when published.
        power_watts: the power reading next to the limit, when published.
        etag: the resource's ETag (for `If-Match`).
    """

    watts: float | None
    capped: bool
    min_watts: float | None = None
    max_watts: float | None = None
    default_watts: float | None = None
    increment: float | None = None
    units: str = "W"
    mode: str | None = None
    power_watts: float | None = None
    etag: str | None = None
    #: `ControlMode@Redfish.AllowableValues`, when published
    modes: tuple[str, ...] = ()
    #: the BMC properties the bounds come from (for messages)
    min_name: str = "AllowableMin"
    max_name: str = "AllowableMax"
    #: whether the GET this reading came from carries the limit itself (`Mechanism.offers`): a
    #: stored reading stands in for the pre-write GET only then
    offered: bool = False
    #: whether the cap survives BMC/host resets, as the resource shows it (`PERSISTENCY_*`; '':
    #: the mechanism has no such property)
    persistency: str = ""
    #: what that GET showed, for the write gate (None: not recorded, e.g. a state from before it was)
    evidence: WriteEvidence | None = None

    @property
    def in_watts(self) -> bool:
        """Whether set points are in watts (not percent)."""
        return self.units.strip().lower() in ("w", "watt", "watts", "")

    def prior(self, uri: str = "") -> Prior:
        """The value to put back later ("restore means what was there before"); `uri`: the limit
        resource it was read from."""
        return Prior(self.watts, self.capped, self.mode, uri, self.persistency)

    def to_json(self) -> dict[str, Any]:
        """The state's `readings` entry (no ETag: it is stale by the next request anyway)."""
        return {
            "watts": self.watts,
            "capped": self.capped,
            "min": self.min_watts,
            "max": self.max_watts,
            "default": self.default_watts,
            "increment": self.increment,
            "mode": self.mode,
            "units": self.units,
            "modes": list(self.modes),
            "offered": self.offered,
            **({"persistency": self.persistency} if self.persistency else {}),
            **({"evidence": self.evidence.to_json()} if self.evidence is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LimitReading:
        """A reading stored by `to_json` (already checked by the state schema)."""
        return cls(
            watts=data.get("watts"),
            capped=bool(data.get("capped")),
            min_watts=data.get("min"),
            max_watts=data.get("max"),
            default_watts=data.get("default"),
            increment=data.get("increment"),
            units=str(data.get("units") or "W"),
            mode=data.get("mode"),
            modes=tuple(data.get("modes") or ()),
            offered=bool(data.get("offered")),
            persistency=str(data.get("persistency") or ""),
            evidence=WriteEvidence.from_json(data["evidence"]) if data.get("evidence") else None,
        )


#: a cap's persistency as its resource shows it (NVIDIA `Oem.Nvidia.PowerLimitPersistency`):
#: true, false, or not shown (absent or null)
PERSISTENCY_ON = "on"
PERSISTENCY_OFF = "off"
PERSISTENCY_ABSENT = "absent"
PERSISTENCIES = (PERSISTENCY_ON, PERSISTENCY_OFF, PERSISTENCY_ABSENT)


@plain_init
@dataclass(frozen=True)
class Prior:
    """A component's cap before devicectl first changed it; stored in the device state."""

    watts: float | None
    capped: bool
    mode: str | None = None
    #: the limit resource it was read from ('' in states recorded before it was kept)
    uri: str = ""
    #: the persistency shown with it (`PERSISTENCY_*`; '' where none was read: a mechanism
    #: without one, or a record from before it was kept)
    persistency: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON for the device state."""
        out: dict[str, Any] = {"watts": self.watts, "capped": self.capped, "mode": self.mode}
        if self.uri:
            out["uri"] = self.uri
        if self.persistency:
            out["persistency"] = self.persistency
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Prior:
        """Parse the state's JSON."""
        watts = data.get("watts")
        mode = data.get("mode")
        return cls(
            float(watts) if watts is not None else None,
            bool(data.get("capped")),
            str(mode) if mode is not None else None,
            str(data.get("uri") or ""),
            str(data.get("persistency") or ""),
        )


@plain_init
@dataclass(frozen=True)
class CapRequest:
    """A request that changes a cap. `if_match` sends the reading's ETag."""

    method: str
    path: str
    body: Mapping[str, Any]
    if_match: bool = True


class Mechanism(ABC):
    """How one kind of cap resource is read and written."""

    #: mechanism name, as in `Component.mechanism`
    name: str = ""
    #: how this resource's ETag behaves by default: `strong` (If-Match is safe), `body-hash` (a hash
    #: over a body with live readings: If-Match fails whenever a reading moved) or `none`
    etag_policy: str = "strong"
    #: the top-level properties a PATCH of this mechanism may name (recorded as evidence)
    writes: ClassVar[tuple[str, ...]] = ()
    #: the actions it may POST, and the parameters each needs (all it may send where the BMC
    #: publishes no parameter evidence: no AllowableValues, no ActionInfo)
    actions: ClassVar[Mapping[str, frozenset[str]]] = {}

    @abstractmethod
    def parse(self, component: Component, doc: Document) -> LimitReading:
        """The cap shown by the component's limit resource."""

    @abstractmethod
    def offers(self, component: Component, doc: Document) -> str:
        """Why this GET of the limit resource does not carry the limit ('' when it does): the
        write gate (`plugins.redfish._platforms.gate`) writes nothing else."""

    def read(self, component: Component, doc: Document, parsed: LimitReading | None = None) -> LimitReading:
        """`parse`, with whether the resource carries the limit (`LimitReading.offered`) and the
        write evidence (`parsed`: this mechanism's `parse` of this very `doc` for this component,
        made already by the caller: not made again)."""
        reading = parsed if parsed is not None else self.parse(component, doc)
        refused = self.offers(component, doc)
        # NOTE: a copy with two fields set, not `dataclasses.replace` (which calls `__init__` with
        # every field again: half of a read's cost, on every read-back)
        amended = object.__new__(reading.__class__)
        amended.__dict__.update(
            reading.__dict__, offered=not refused, evidence=WriteEvidence.of(self, refused, doc)
        )
        return amended

    @abstractmethod
    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        """The request that sets an explicit cap of `watts`."""

    @abstractmethod
    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        """The request that removes devicectl's cap (back to the BMC default / no cap)."""

    def guard(
        self, request: CapRequest, component: Component, current: LimitReading, allow_power_off: bool
    ) -> CapRequest | str:
        """The cap request made safe for what the BMC does above the limit, or why it is refused."""
        return request

    def persist(self, request: CapRequest, doc: Document, persistent: bool = True) -> CapRequest:
        """The request asking the cap to survive BMC/host resets (or, `persistent` false, not to),
        where the BMC supports it."""
        return request

    def persistence(self, component: Component, request: CapRequest, doc: Document, persistent: bool) -> str:
        """What a cap's answer says of whether it survives resets, where that is not what was asked
        (`persistent`: the `persistent_caps` option) or not known; '' otherwise. By default: asked
        to persist where `persist` sends nothing, it is the BMC's and not shown."""
        if persistent and self.persist(request, doc, True) == request:
            return (
                f"{component.label}: persistent_caps is set, but {component.limit_uri} offers no "
                "persistency setting: whether this cap survives a BMC or host reset is the BMC's and "
                "not shown"
            )
        return ""

    def restore_request(
        self, component: Component, prior: Prior, current: LimitReading, doc: Document
    ) -> CapRequest:
        """The request that puts a prior value back (default: set it, or clear when it was uncapped)."""
        if prior.capped and prior.watts is not None:
            return self.set_request(component, round(prior.watts), current)
        return self.clear_request(component, current, doc)

    def matches(self, reading: LimitReading, prior: Prior) -> bool:
        """Whether a reading shows the prior value in force (restore is then a no-op)."""
        if not prior.capped:
            return not reading.capped
        if (
            prior.persistency in (PERSISTENCY_ON, PERSISTENCY_OFF)
            and reading.persistency
            and reading.persistency != prior.persistency
        ):
            return False  # the value, but not surviving resets as it did (or surviving them now)
        return reading.capped and same_watts(reading.watts, prior.watts)


def same_watts(a: float | None, b: float | None, tolerance: float = 0.5) -> bool:
    """Equal set points (None only equals None)."""
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tolerance


def number(value: Any) -> float | None:
    """A JSON number as float; None for null, booleans and anything else."""
    kind = type(value)
    if kind is float:  # what JSON gives, told by type first: every reading parses several
        return value  # type: ignore[no-any-return]
    if kind is int:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


#: what firmware shows in a watts limit for "no limit", never a cap: all ones in 16 and 32 bits
#: (0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF), and the 32-bit ones as milliwatts shown in watts (an NVIDIA
#: HGX GPU without a limit shows 4294967 W: 0xFFFFFFFF mW / 1000)
NO_LIMIT = frozenset({65535.0, 2147483647.0, 4294967295.0, 2147483.0, 2147483.647, 4294967.0, 4294967.295})


def limit_watts(value: Any) -> float | None:
    """A watts limit as float; None for null, anything not a number and a no-limit sentinel."""
    watts = number(value)
    return None if watts is None or watts in NO_LIMIT else watts


def tightest(
    lows: list[tuple[float | None, str]], highs: list[tuple[float | None, str]]
) -> tuple[tuple[float | None, str], tuple[float | None, str]]:
    """The tightest range of all a BMC publishes for one limit: the highest minimum and the lowest
    maximum, each with the property it comes from (None where none is published)."""
    shown_lows = [(v, n) for v, n in lows if v is not None]
    shown_highs = [(v, n) for v, n in highs if v is not None]
    low = max(shown_lows, key=lambda b: b[0], default=(None, "AllowableMin"))
    high = min(shown_highs, key=lambda b: b[0], default=(None, "AllowableMax"))
    return low, high


def set_point_in_force(control: Mapping[str, Any]) -> float | None:
    """The `SetPoint` of a Control (or its excerpt) as a limit in force: None when the control is
    `Disabled` (a stale SetPoint stays in the body) or shows a no-limit sentinel."""
    if control.get("ControlMode") == "Disabled":
        return None
    return limit_watts(control.get("SetPoint"))
