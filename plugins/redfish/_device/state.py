"""The Redfish plugin's device state JSON: read from `ctx.state`, returned in `Outcome.state`.

Shape (version 2; `plugins.redfish._device.schema` checks it and migrates version 1 and unversioned state):

```json
{
  "version": 2,
  "discovery": {"platform": "environment_metrics", "url": "https://…", "firmware": "…",
                "gpus": [{"key": "gpu/0", "name": "GPU_0", "limit_uri": "…", …}], …},
  "priors": {"topology": {"gpu/0": {"watts": 1200, "capped": false, "mode": "Automatic"}},
             "rg:job-42": {"module/0": {"watts": 2820, "capped": false, "mode": "Automatic"}}},
  "applied": {"gpu/0": {"watts": 700, "requested": 700, "scope": "topology", "at": "2025-…Z"}},
  "profiles": {"priors": {"rg:job-42": {"gpu/0": "0x…"}},
               "gpus": {"gpu/0": {"requested": [5], "enforced": [5], "at": "…"}}},
  "policies": {"topology": "Node-High", "rg:job-42": "Node-Low"},
  "sessions": {"https://10.0.0.5:443": ["/redfish/v1/SessionService/Sessions/8f3a"]},
  "readings": {"gpu/0": {"watts": 700, "capped": true, "min": 200, "max": 1200, "mode": "Manual", …}}
}
```

`priors` are per scope (`topology`, `rg:<resource group>`): the value each component had before
the first change made in that scope. A second activation never overwrites them; deactivation
restores and then drops them. `sessions` are the URIs (never the tokens) of the Redfish sessions
this controller opened, so a restarted process can delete the ones a crash left behind. Nothing
secret is ever stored here.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from plugins.base import InvalidRequestError
from plugins.redfish._device.schema import STATE_VERSION, LoadedState, load_state
from plugins.redfish._discovery.layout import Discovery
from plugins.redfish._platforms import LimitReading, Prior

TOPOLOGY = "topology"


def rg_scope(resource_group: str) -> str:
    """The prior-value scope of a resource group (never a nameless one: `gpu_scope` puts GPU caps
    sent without a group under the topology)."""
    if not resource_group.strip():
        raise InvalidRequestError("a resource group needs a name (got an empty one)")
    return f"rg:{resource_group}"


def gpu_scope(resource_group: str) -> str:
    """Where GPU caps are recorded: their resource group's scope, or the topology's when the
    request names no group (they are restored with the topology's, never under a nameless group)."""
    return rg_scope(resource_group) if resource_group else TOPOLOGY


class DeviceState:
    """A mutable working copy of the state; `to_json()` is what the operation returns."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        # checked and migrated (raises InvalidRequestError on anything malformed) unless the host
        # already did (`load_state` made it), then copied: the caller's copy is never changed
        checked = data if isinstance(data, LoadedState) else load_state(data or {})
        # NOTE: copied on write: a section is copied when first changed (`_section`), read in
        # place until then (`_view`); copying every section in and out again was two deep copies
        # of most of a state per request (the fan-out benchmark's profile), and a wave's request
        # changes a few sections of it
        self._data = dict(checked)
        self._data["version"] = STATE_VERSION
        #: sections this object copied (changes go there); the others are the caller's, unchanged
        self._owned: set[str] = set()
        #: readings parsed (or set) so far, by component key: a reading's evidence makes parsing
        #: one cost more than the lookup, and an activation asks for the node modules' several times
        self._readings: dict[str, LimitReading | None] = {}
        self.changed = False

    # ---- discovery ------------------------------------------------------------------------------

    @property
    def discovery(self) -> Discovery | None:
        """The cached discovery, if valid."""
        data = self._data.get("discovery")
        return Discovery.from_json(data) if isinstance(data, Mapping) else None

    @discovery.setter
    def discovery(self, value: Discovery | None) -> None:
        if value is None:
            self._data.pop("discovery", None)
        else:
            self._data["discovery"] = value.to_json()
        self.changed = True

    @property
    def discovery_section(self) -> object:
        """The stored discovery JSON itself: replaced whole, never changed in place, so its
        identity says whether it is the one a cached `Discovery` was parsed from."""
        return self._data.get("discovery")

    # ---- prior values ---------------------------------------------------------------------------

    def prior(self, scope: str, key: str) -> Prior | None:
        """The prior value of one component in a scope."""
        data = self._view("priors").get(scope, {}).get(key)
        return Prior.from_json(data) if isinstance(data, Mapping) else None

    def priors(self, scope: str) -> dict[str, Prior]:
        """Every prior value recorded in a scope."""
        return {
            key: Prior.from_json(value)
            for key, value in self._view("priors").get(scope, {}).items()
            if isinstance(value, Mapping)
        }

    def has_prior(self, scope: str, key: str) -> bool:
        """Whether a prior value of the component is recorded in the scope (`record_prior` then
        keeps it)."""
        return key in self._view("priors").get(scope, {})

    def record_prior(self, scope: str, key: str, prior: Prior) -> bool:
        """Record a prior value unless one is already recorded (returns whether it was new)."""
        if key in self._view("priors").get(scope, {}):
            return False
        self._section("priors").setdefault(scope, {})[key] = prior.to_json()
        self.changed = True
        return True

    def drop_prior(self, scope: str, key: str) -> None:
        """Forget one prior value (after it was restored)."""
        if key not in self._view("priors").get(scope, {}):
            return
        priors = self._section("priors")
        scoped = priors.get(scope, {})
        if key in scoped:
            del scoped[key]
            self.changed = True
        if not scoped:
            priors.pop(scope, None)

    def scopes(self) -> list[str]:
        """Scopes with recorded prior values."""
        return sorted(self._view("priors"))

    # ---- applied caps ---------------------------------------------------------------------------

    def set_applied(self, key: str, watts: float | None, requested: float | None, scope: str) -> None:
        """Remember the cap read back after a change (None: no cap / BMC default)."""
        applied = self._section("applied")
        if watts is None:
            applied.pop(key, None)
        else:
            applied[key] = {"watts": watts, "requested": requested, "scope": scope, "at": _now()}
        self.changed = True

    def applied(self, key: str) -> float | None:
        """The last cap read back for a component, if any."""
        entry = self._view("applied").get(key)
        if isinstance(entry, Mapping) and isinstance(entry.get("watts"), int | float):
            return float(entry["watts"])
        return None

    # ---- policies -------------------------------------------------------------------------------

    def set_policy(self, scope: str, name: str | None) -> None:
        """Remember which policy a scope applied (None forgets it)."""
        policies = self._section("policies")
        if name is None:
            policies.pop(scope, None)
        else:
            policies[scope] = name
        self.changed = True

    # ---- workload profiles ----------------------------------------------------------------------

    def profile_prior(self, scope: str, key: str) -> str | None:
        """The requested-profile mask a GPU had before the scope's first profile change."""
        value = self._view("profiles").get("priors", {}).get(scope, {}).get(key)
        return str(value) if value is not None else None

    def profile_priors(self, scope: str) -> dict[str, str]:
        """Every recorded profile mask of a scope."""
        return dict(self._view("profiles").get("priors", {}).get(scope, {}))

    def record_profile_prior(self, scope: str, key: str, mask: str) -> None:
        """Record a GPU's requested mask unless already recorded for this scope."""
        scoped = self._section("profiles").setdefault("priors", {}).setdefault(scope, {})
        if key not in scoped:
            scoped[key] = mask
            self.changed = True

    def drop_profile_priors(self, scope: str) -> None:
        """Forget a scope's profile masks."""
        priors = self._section("profiles").get("priors", {})
        if scope in priors:
            del priors[scope]
            self.changed = True

    def set_profiles(self, key: str, requested: list[int], enforced: list[int]) -> None:
        """Remember a GPU's requested and enforced profile ids (as read back)."""
        gpus = self._section("profiles").setdefault("gpus", {})
        gpus[key] = {"requested": requested, "enforced": enforced, "at": _now()}
        self.changed = True

    # ---- last limit readings ---------------------------------------------------------------------

    def reading(self, key: str) -> LimitReading | None:
        """A component's last read-back limit (lets a later change skip its pre-write GET)."""
        if key in self._readings:
            return self._readings[key]
        data = self._view("readings").get(key)
        reading = self._readings[key] = LimitReading.from_json(data) if isinstance(data, Mapping) else None
        return reading

    def reading_range(self, key: str) -> tuple[float | None, float | None] | None:
        """The `min_watts` and `max_watts` of `reading(key)` (None: no reading), without parsing
        the rest of it (its evidence) where it is not parsed yet."""
        if key in self._readings:
            reading = self._readings[key]
            return None if reading is None else (reading.min_watts, reading.max_watts)
        data = self._view("readings").get(key)
        return (data.get("min"), data.get("max")) if isinstance(data, Mapping) else None  # as `from_json`

    def set_reading(self, key: str, reading: LimitReading | None) -> None:
        """Remember (or forget) a component's last read-back limit."""
        self._readings.pop(key, None)  # parsed again from what is stored (a reading is stored as JSON)
        readings = self._section("readings")
        if reading is None:
            if readings.pop(key, None) is not None:
                self.changed = True
            return
        readings[key] = reading.to_json()
        self.changed = True

    def clear_readings(self) -> None:
        """Forget every stored reading (discovery is being redone)."""
        self._readings.clear()
        if self._data.pop("readings", None):
            self.changed = True

    # ---- Redfish sessions ------------------------------------------------------------------------

    def sessions(self, origin: str) -> list[str]:
        """URIs of the Redfish sessions recorded for a BMC (ours, possibly left by a crashed process)."""
        return list(self._view("sessions").get(origin, []))

    def set_sessions(self, origin: str, uris: list[str]) -> None:
        """Record the session URIs this controller holds open on a BMC (never tokens)."""
        if self._view("sessions").get(origin, []) == uris:
            return
        sessions = self._section("sessions")
        if uris:
            sessions[origin] = list(uris)[-8:]
        else:
            sessions.pop(origin, None)
        self.changed = True

    # ---- output ---------------------------------------------------------------------------------

    def to_json(self) -> LoadedState:
        """The state for `Outcome.state`: handed over, not copied. Its sections are never changed
        in place afterwards: a later change through this object copies its section first, as the
        first one did (the sections it did not change are the caller's own, likewise unchanged).

        A `LoadedState`: it was checked when this object was made and has changed only through
        the typed setters since, so the host may hand it back for the next operation unchecked."""
        self._owned.clear()
        return LoadedState(self._data.copy())

    def _view(self, name: str) -> Mapping[str, Any]:
        """A section to read (never to change: it may be the caller's)."""
        section = self._data.get(name)
        return section if isinstance(section, dict) else _EMPTY

    def _section(self, name: str) -> dict[str, Any]:
        """A section to change: this object's own copy (made at the first change)."""
        section = self._data.get(name)
        if name in self._owned and isinstance(section, dict):
            return section
        if not isinstance(section, dict):
            section = {}
        elif name in _REPLACED_WHOLE:
            section = dict(section)  # its entries are shared: never changed in place, only replaced
        elif name in _SCOPED:
            # its scopes are changed in place, their entries only replaced: the scopes copied
            section = {scope: dict(v) if type(v) is dict else _copy(v) for scope, v in section.items()}
        else:
            section = _copy(section)
        self._data[name] = section
        self._owned.add(name)
        return section


#: sections whose setters only ever put or pop whole entries (`set_reading`, `set_applied`,
#: `set_sessions`, `set_policy`): their first change copies the section's dict, not its entries (a
#: GB200 tray's readings, evidence included, are most of its state, and a wave's request changes
#: eight of them); `profiles` changes nested dicts in place, so it is copied deep
_REPLACED_WHOLE = frozenset({"readings", "applied", "sessions", "policies"})
#: sections of scopes whose setters put or delete whole entries in a scope's dict (`record_prior`,
#: `drop_prior`): their first change copies the section and its scopes' dicts, not the entries (a
#: wave's request records eight priors in a new scope next to those of earlier ones)
_SCOPED = frozenset({"priors"})
_SCALARS = frozenset({str, int, float, bool, type(None)})
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _copy(value: Any) -> Any:
    """A deep copy of checked state JSON (its depth is bounded by `_schema.MAX_DEPTH`).

    Dicts, lists and scalars directly, anything else through `copy.deepcopy`: about 4x faster
    than `copy.deepcopy` on a whole state, which copies through its memo and reduce protocol.
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    # scalars inline: a call per scalar was most of the cost
    if kind is dict:
        return {key: item if type(item) in _SCALARS else _copy(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _SCALARS else _copy(item) for item in value]
    if kind is tuple:  # e.g. a reading's allowable values, as the plugin itself stored them
        return tuple(item if type(item) in _SCALARS else _copy(item) for item in value)
    return copy.deepcopy(value)


def _now() -> str:
    """The current UTC time to the second (each cap an operation sets is stamped with it)."""
    return _second(int(time.time()))


@functools.lru_cache(maxsize=1)
def _second(second: int) -> str:
    """A second, formatted once however many caps are stamped with it."""
    return datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")
