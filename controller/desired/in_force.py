"""What is in force on a device, per component: requested (the desired limit a change left, or the
plugin's last request), enforced (read back: the last drift check, else the plugin's last reading),
the allowed range the device reports, and drift; with the active resource groups, policies and
profiles. Read from the controller's desired limits and the plugin's state JSON (Redfish and NVML
shapes; a plugin with another shape shows only the desired limits). Nothing here trusts the state
JSON's types: a value that is not a number is left out, never guessed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Component:
    component: str
    requested: float | None = None
    enforced: float | None = None
    min: float | None = None
    max: float | None = None
    #: "ok", "drifted" (the last check found another value), "not checked", or "" (no desired limit)
    drift: str = ""
    #: when the limit was last set (the desired limit's time, else the plugin's)
    changed_at: str = ""
    #: False: the device reports no cap in force (`enforced` is then its default); None: not read
    capped: bool | None = None
    #: the last change removed the cap: nothing is requested (`requested` is None)
    removed: bool = False


@dataclass
class InForce:
    components: list[Component] = field(default_factory=list)
    resource_groups: list[str] = field(default_factory=list)
    #: scope -> policy name ("topology": "Node-High")
    policies: dict[str, str] = field(default_factory=dict)
    #: component -> enabled profile ids
    profiles: dict[str, list[int]] = field(default_factory=dict)
    #: component -> why the plugin refuses to write its cap (Redfish discovery: no limit, no proven scope)
    refused: dict[str, str] = field(default_factory=dict)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _section(state: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = state.get(key)
    return value if isinstance(value, Mapping) else {}


def _refused(discovery: Mapping[str, Any]) -> dict[str, str]:
    """Components a Redfish discovery found no writable cap for, with its reason."""
    out: dict[str, str] = {}
    if not discovery:
        return out
    if not discovery.get("node"):
        out["node"] = str(discovery.get("note") or "no node power limit on this BMC")
    for section in ("gpus", "cpus"):
        for comp in discovery.get(section) or ():
            if isinstance(comp, Mapping) and not comp.get("mechanism"):
                out[str(comp.get("key") or "")] = str(comp.get("reason") or discovery.get("note") or "")
    return out


def in_force(state: Mapping[str, Any] | None, desired: Iterable[Any] = ()) -> InForce:
    """The view of one device. `desired`: rows with `component`, `watts` or `desired_watts`,
    `enforced_watts`, `drift_at`, `checked_at`, `set_at` (store rows or DesiredLimit messages)."""
    state = state if isinstance(state, Mapping) else {}
    out = InForce()
    rows: dict[str, Component] = {}

    def row(key: str) -> Component:
        return rows.setdefault(key, Component(key))

    # Redfish: readings (what the BMC last reported, with its allowed range) and applied caps
    for key, reading in _section(state, "readings").items():
        if isinstance(reading, Mapping):
            r = row(str(key))
            r.enforced = _number(reading.get("watts"))
            r.capped = reading.get("capped") if isinstance(reading.get("capped"), bool) else None
            r.min, r.max = _number(reading.get("min")), _number(reading.get("max"))
    for key, applied in _section(state, "applied").items():
        if isinstance(applied, Mapping):
            r = row(str(key))
            r.requested = _number(applied.get("requested"))
            r.enforced = _number(applied.get("watts")) if r.enforced is None else r.enforced
            r.changed_at = str(applied.get("at") or "")
    out.refused = _refused(_section(state, "discovery"))
    # NVML: limits[uuid][scope].requested_mw
    if state.get("plugin") == "nvml":
        for uuid, scopes in _section(state, "limits").items():
            for scope, limit in (scopes if isinstance(scopes, Mapping) else {}).items():
                watts = _number(limit.get("requested_mw")) if isinstance(limit, Mapping) else None
                if watts is not None:
                    row(f"{scope} {uuid}").requested = watts / 1000
    for d in desired:
        r = row(d.component)
        r.requested = _optional(d, "desired_watts") if hasattr(d, "desired_watts") else d.watts
        enforced = _optional(d, "enforced_watts")
        r.enforced = enforced if enforced is not None else r.enforced
        drift_at, checked_at = _optional(d, "drift_at"), _optional(d, "checked_at")
        r.drift = (
            "not checked"
            if checked_at is None
            else "drifted"
            if drift_at is not None and _time(drift_at) >= _time(checked_at)
            else "ok"
        )
        set_at = _optional(d, "set_at")
        r.changed_at = _iso(set_at) if set_at is not None else r.changed_at
        if r.capped is False and d.component not in _section(state, "applied"):
            # the cap was removed: what the change left is the device's default, not a request
            r.requested, r.removed = None, True
    _members_follow_their_total(rows)
    out.components = sorted(rows.values(), key=lambda c: _order(c.component))
    _groups_policies_profiles(state, out)
    return out


def from_verification(result: Any) -> list[Component]:
    """The caps a finished verification read (its `cap KEY` checks' evidence): what the BMC
    reported for a node no change has read yet."""
    checks = result.get("checks") if isinstance(result, Mapping) else None
    out = []
    for check in checks if isinstance(checks, list) else []:
        name = check.get("name") if isinstance(check, Mapping) else None
        evidence = check.get("evidence") if isinstance(check, Mapping) else None
        if not isinstance(name, str) or not name.startswith("cap ") or not isinstance(evidence, Mapping):
            continue
        capped = evidence.get("capped")
        out.append(
            Component(
                name[4:],
                enforced=_number(evidence.get("watts")),
                min=_number(evidence.get("min")),
                max=_number(evidence.get("max")),
                capped=capped if isinstance(capped, bool) else None,
            )
        )
    return sorted(out, key=lambda c: _order(c.component))


#: a total's members (a GB200 node cap is the sum of its modules', the `cpu` element its CPUs')
_MEMBERS = {"module": "node", "cpu": "cpu"}


def _members_follow_their_total(rows: Mapping[str, Component]) -> None:
    """A member row (`module/0`, `cpu/1`) of a total with a desired limit shares its drift: the
    total's check read the members too. Where that check found the total drifted, a member's value
    from the plugin's state predates it, so it is not shown as enforced (the total's drift line
    says what each member read)."""
    for r in rows.values():
        kind, _, index = r.component.partition("/")
        total = rows.get(_MEMBERS.get(kind, "")) if index else None
        if total is None or not total.drift or r.drift:
            continue
        r.drift = total.drift
        if total.drift == "drifted":
            r.enforced = None


def _groups_policies_profiles(state: Mapping[str, Any], out: InForce) -> None:
    priors = _section(state, "priors")
    policies = _section(state, "policies")
    # `rg:` alone is the scope of GPU caps sent with no resource group (`send gpu-policies` without
    # --resource-group): caps outside any group, not a group without a name
    groups = {str(s)[3:] for s in (*priors, *policies) if str(s).startswith("rg:") and len(str(s)) > 3}
    nvml_group = _section(policies, "resource_group").get("name")
    if isinstance(nvml_group, str) and nvml_group:
        groups.add(nvml_group)
    out.resource_groups = sorted(groups)
    out.policies = {str(k): v for k, v in policies.items() if isinstance(v, str)}
    profiles = _section(state, "profiles")
    for key, entry in {**_section(profiles, "gpus"), **profiles}.items():
        if key in ("gpus", "priors") or not isinstance(entry, Mapping):
            continue
        ids = entry.get("enforced", entry.get("enabled"))
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            out.profiles[str(key)] = list(ids)


def _optional(d: Any, name: str) -> Any:
    """A field that may be unset: protobuf's optional and message fields, or a store row's None."""
    if hasattr(d, "HasField"):
        return getattr(d, name) if d.HasField(name) else None
    return getattr(d, name, None)


def _time(value: Any) -> datetime:
    return value.ToDatetime() if hasattr(value, "ToDatetime") else value.replace(tzinfo=None)


def _iso(value: Any) -> str:
    return _time(value).isoformat(timespec="seconds") + "Z"


_KIND_ORDER = {"node": 0, "cpu": 1, "memory": 2}


def _order(component: str) -> tuple[int, str, int]:
    kind, _, index = component.partition("/")
    return (_KIND_ORDER.get(kind, 3), kind, int(index) if index.isdigit() else 0)
