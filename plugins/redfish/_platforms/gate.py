"""The one write gate every cap write passes, for every platform: write only what the BMC offers.

A request that changes a limit is sent only when the evidence of the limit resource's own last GET
(`WriteEvidence`, kept with the reading, so the same rule holds where a stored reading stands in for
the pre-write GET) allows it:

- the limit itself (`Mechanism.offers`): a `Control` with `ControlType: Power` and a `SetPoint`, an
  `EnvironmentMetrics.PowerLimitWatts` object, a `PowerControl[n].PowerLimit` object, or an OEM
  action the resource lists under `Actions`;
- a PATCH goes to that resource and names only properties its GET showed (an absent property is
  never written: a restore puts back exactly what was there, nothing more), each value among the
  property's `@Redfish.AllowableValues` where the resource publishes them;
- a POST goes only to the target of an action of the write's mechanism (`Mechanism.actions`) that
  the resource lists, and its body names only the action's published parameters (its
  `@Redfish.ActionInfo`, else the `<parameter>@Redfish.AllowableValues` of the entry), each value
  among the allowed ones; where the BMC publishes no parameter evidence, only the parameters the
  mechanism needs;
- a limit value written (`SetPoint`, `LimitInWatts`, `PowerLimitInWatts`) lies within the range the
  reading publishes.

Anything else is refused before it is sent, with the reason; nothing reaches the BMC.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms._base import (
    ActionEvidence,
    CapRequest,
    LimitReading,
    Mechanism,
    WriteEvidence,
    number,
)

#: the properties of a request body that carry the limit value written
LIMIT_VALUES = frozenset({"SetPoint", "LimitInWatts", "PowerLimitInWatts"})


def absent_property(body: Mapping[str, Any], shown: frozenset[str], prefix: str = "") -> str:
    """The first property a PATCH body names that the GET did not show ('' when none): objects
    are compared member by member, arrays member by member where the PATCH member is not `{}`."""
    for key, value in body.items():
        where = f"{prefix}{key}"
        if where not in shown:
            return where
        if isinstance(value, Mapping):
            missing = absent_property(value, shown, f"{where}/")
            if missing:
                return missing
        elif isinstance(value, list):
            for i, member in enumerate(value):
                if not (isinstance(member, Mapping) and member):
                    continue
                if f"{where}/{i}" not in shown:
                    return f"{where}/{i}"
                missing = absent_property(member, shown, f"{where}/{i}/")
                if missing:
                    return missing
    return ""


def _scalars(body: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(property path, name, value) of every scalar in a request body."""
    for key, value in body.items():
        where = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _scalars(value, f"{where}/")
        elif isinstance(value, list):
            for i, member in enumerate(value):
                if isinstance(member, Mapping):
                    yield from _scalars(member, f"{where}/{i}/")
        else:
            yield where, str(key), value


def _not_allowed(body: Mapping[str, Any], allowable: Mapping[str, tuple[str, ...]], where: str) -> str:
    for path, _, value in _scalars(body):
        allowed = allowable.get(path)
        if allowed is not None and value is not None and str(value) not in allowed:
            return (
                f"{where} allows {path} only as {', '.join(allowed)} "
                f"({path}@Redfish.AllowableValues), not {value}; nothing written"
            )
    return ""


def _out_of_range(body: Mapping[str, Any], reading: LimitReading, where: str) -> str:
    for path, name, value in _scalars(body):
        watts = number(value)
        if name not in LIMIT_VALUES or watts is None or not reading.in_watts:
            continue
        low, high = reading.min_watts, reading.max_watts
        if (low is not None and watts < low - 0.5) or (high is not None and watts > high + 0.5):
            lo = f"{low:g}" if low is not None else "?"
            hi = f"{high:g}" if high is not None else "?"
            return (
                f"{path} {watts:g} W is outside the range {where} publishes ({reading.min_name} {lo}, "
                f"{reading.max_name} {hi}); nothing written"
            )
    return ""


def _action_refusal(
    mech: Mechanism, evidence: WriteEvidence, request: CapRequest, info: Mapping[str, Any] | None
) -> str:
    path = request.path.rstrip("/")
    action: ActionEvidence | None = evidence.actions.get(path)
    if action is None:
        names = ", ".join(n.lstrip("#") for n in mech.actions) or "none"
        return (
            f"{path} is not the target of an action {evidence.path} lists for this limit "
            f"({names}); nothing written"
        )
    name = action.name.lstrip("#")
    published = _info_parameters(info) if info is not None else None
    if published is not None:
        for key, value in request.body.items():
            if key not in published:
                why = f"is not a parameter its ActionInfo ({action.info}) publishes"
                return f"{name}: {key} {why}; nothing written"
            allowed = published[key]
            if allowed and not isinstance(value, Mapping | list) and str(value) not in allowed:
                why = f"is not among its AllowableValues ({', '.join(allowed)})"
                return f"{name}: {key} {value} {why}; nothing written"
        return ""
    for key, value in request.body.items():
        values = action.parameters.get(key)
        if values is not None:
            if not isinstance(value, Mapping | list) and str(value) not in values:
                return (
                    f"{name}: {key} {value} is not among {key}@Redfish.AllowableValues "
                    f"({', '.join(values)}); nothing written"
                )
            continue
        if action.parameters or key not in mech.actions.get(action.name, frozenset()):
            why = "the parameters it publishes" if action.parameters else "the parameters this write needs"
            return f"{name}: {key} is not among {why}; nothing written"
    return ""


def _info_parameters(info: Mapping[str, Any]) -> dict[str, tuple[str, ...]] | None:
    """An ActionInfo's parameters and their `AllowableValues` (None when it lists none)."""
    params = info.get("Parameters")
    if not isinstance(params, list):
        return None
    out: dict[str, tuple[str, ...]] = {}
    for p in params:
        if isinstance(p, Mapping) and isinstance(p.get("Name"), str):
            values = p.get("AllowableValues")
            out[str(p["Name"])] = tuple(str(v) for v in values) if isinstance(values, list) else ()
    return out


def refusal(
    mech: Mechanism,
    component: Component,
    request: CapRequest,
    reading: LimitReading,
    action_info: Mapping[str, Any] | None = None,
) -> str:
    """Why `request` must not be sent ('' when it may), judged on the evidence of `reading`'s GET
    (the limit resource's last, or the stored reading standing in for it; see the module
    docstring). `action_info`: the ActionInfo the action names, where it was read. The caller
    names the component."""
    evidence = reading.evidence
    if evidence is None:
        return f"{component.limit_uri}: no evidence of what its GET showed is recorded; nothing written"
    if evidence.refused:
        return f"{evidence.refused}; nothing written"
    read = evidence.path
    if request.method == "POST":
        problem = _action_refusal(mech, evidence, request, action_info)
    elif request.path.rstrip("/") != read:
        return (
            f"{request.path.rstrip('/')} is not the resource whose limit was read ({read}); nothing written"
        )
    else:
        missing = absent_property(request.body, evidence.shown)
        if missing:
            return f"{read} does not carry {missing}, which the write would set; nothing written"
        problem = _not_allowed(request.body, evidence.allowable, read)
    return problem or _out_of_range(request.body, reading, read)
