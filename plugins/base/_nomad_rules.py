"""Nomad's checks on a fingerprint, run before we send one.

A Nomad client validates every device group a plugin fingerprints and, when any group fails,
rejects the whole response (`client/devicemanager/instance.go`, `handleFingerprint`): one bad
attribute hides all of a plugin's devices. The rules, from Nomad v1.6.5:

- `plugins/device/device.go`, `DeviceGroup.Validate`: vendor, type and name must be set; every
  device must pass `Device.Validate` (an ID must be set); every attribute must pass
  `Attribute.Validate`;
- `plugins/shared/structs/attribute.go`, `Attribute.Validate`: a unit must be one of
  `UnitIndex` (`plugins/shared/structs/units.go`); a unit only on an integer or float; exactly
  one value set;
- the wire carries an integer as int64 (`plugins/shared/structs/proto/attribute.proto`).
"""

from __future__ import annotations

from collections.abc import Iterable

from plugins.base import _streams as s

#: Nomad's units (plugins/shared/structs/units.go): binary and decimal bytes, byte rates,
#: hertz, watts. There is no plain byte ("B") nor any other unit.
UNITS = frozenset(
    [f"{p}iB" for p in "KMGTPE"]
    + ["kB", "KB", "MB", "GB", "TB", "PB", "EB"]
    + [f"{p}iB/s" for p in "KMGTPE"]
    + ["kB/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s"]
    + ["MHz", "GHz"]
    + ["mW", "W", "kW", "MW", "GW"]
)

_INT64 = (-(2**63), 2**63 - 1)


def attribute_problem(attr: s.Attribute) -> str | None:
    """Why Nomad's `Attribute.Validate` would refuse `attr`, or None."""
    value = attr.value
    if attr.unit:
        if attr.unit not in UNITS:
            return f"unrecognized unit {attr.unit!r}"
        if isinstance(value, bool | str):
            return "unit can not be specified on a boolean or string attribute"
    if value is None or not isinstance(value, bool | int | float | str):
        return "no attribute value set"
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
        return f"integer {value} does not fit in int64"
    return None


def group_problems(group: s.DeviceGroup) -> list[str]:
    """Nomad's `DeviceGroup.Validate`, one message per broken rule."""
    problems = [
        f"device {what} must be specified"
        for what, value in (("vendor", group.vendor), ("type", group.type), ("name", group.name))
        if not value
    ]
    problems += [f"device {i}: device ID must be specified" for i, d in enumerate(group.devices) if not d.id]
    for name, attr in sorted(group.attributes.items()):
        why = attribute_problem(attr)
        if why is not None:
            problems.append(f"device attribute {name!r} invalid: {why}")
    return problems


def fingerprint_problems(groups: Iterable[s.DeviceGroup]) -> list[str]:
    """Every reason a Nomad client would reject this fingerprint, prefixed like its own messages."""
    return [f"device group {i}: {p}" for i, g in enumerate(groups) for p in group_problems(g)]
