"""Deprecated `Chassis/{id}/Power` `PowerControl[].PowerLimit.LimitInWatts` (Dell, HPE, Supermicro…).

Set: `PATCH {"PowerControl": [{"PowerLimit": {"LimitInWatts": <int>}}]}`; remove: `LimitInWatts: null`.
Node caps only.

`LimitException` says what the BMC does when the load stays above the limit (Power.v1 schema);
`HardPowerOff` turns the node off. A cap is written with `LimitException: NoAction` where the
resource shows the property (and, when it lists `LimitException@Redfish.AllowableValues`, allows
NoAction), and restore puts the prior value back; where HardPowerOff would stay in force the cap is
refused unless the inventory entry sets `allow_power_off_on_limit = true` (AMI MegaRAC on a Gigabyte
H262 ships with HardPowerOff).

Stock OpenBMC bmcweb (the captured 2.15) shows `PowerLimit` without `LimitInWatts` while power capping
is disabled (D-Bus `PowerCapEnable` false) and answers a write with `ActionNotSupported`
(openbmc/bmcweb `redfish-core/lib/power.hpp`, `setPowerCapOverride`): reported as "capping disabled",
nothing is written. Later bmcweb shows `LimitInWatts: null` then, which reads as "no cap": a cap is
attempted and fails with the BMC's ActionNotSupported message, nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plugins.redfish._discovery.layout import (
    AUTO,
    LEGACY_POWER,
    MECH_LEGACY,
    Component,
    Discovery,
    generic_node_metrics,
)
from plugins.redfish._discovery.walk import legacy_power_of
from plugins.redfish._platforms._base import (
    CapRequest,
    LimitReading,
    Mechanism,
    Prior,
    limit_watts,
    number,
    tightest,
)
from plugins.redfish._platforms.platform import Platform, Probe
from plugins.redfish._wire.document import Document

LIMIT_EXCEPTION = "limit-exception"
LIMIT_EXCEPTION_FIXED = "limit-exception-fixed"
#: LimitException values that leave the node running when the load stays above the cap
HARMLESS = (None, "NoAction", "LogEventOnly")


def consumed_watts(control: Mapping[str, Any]) -> float | None:
    """A `PowerControl` member's power: `PowerConsumedWatts`, else the `PowerMetrics` average
    (some AMI MegaRAC firmware shows only `PowerMetrics.AverageConsumedWatts`)."""
    watts = number(control.get("PowerConsumedWatts"))
    if watts is None:
        metrics = control.get("PowerMetrics")
        watts = number(metrics.get("AverageConsumedWatts")) if isinstance(metrics, Mapping) else None
    return watts


def _hpe_safe_minimum(body: Mapping[str, Any]) -> float | None:
    """iLO's `Oem.Hpe.MinimumSafelyAchievableCap`, when it says the value is valid."""
    oem = body.get("Oem")
    hpe = oem.get("Hpe") if isinstance(oem, Mapping) else None
    if not isinstance(hpe, Mapping) or hpe.get("MinimumSafelyAchievableCapValid") is False:
        return None
    return number(hpe.get("MinimumSafelyAchievableCap")) or None


class LegacyPowerMechanism(Mechanism):
    """The node cap in `Power.PowerControl[member].PowerLimit`."""

    name = MECH_LEGACY
    writes = ("PowerControl",)

    def parse(self, component: Component, doc: Document) -> LimitReading:
        controls = doc.get("PowerControl") or []
        control: Mapping[str, Any] = {}
        if component.member < len(controls) and isinstance(controls[component.member], Mapping):
            control = controls[component.member]
        limit = control.get("PowerLimit")
        limit = limit if isinstance(limit, Mapping) else {}
        watts = limit_watts(limit.get("LimitInWatts"))
        exception = limit.get("LimitException")
        # NOTE: Power has no AllowableMin/Max; PowerCapacityWatts bounds what a cap can mean
        # (RP Power.v1_7_3.json), vendors publish their capping range in OEM data next to the limit,
        # and the tightest of them all stands (the BMC validates the rest).
        # NOTE: PowerCapacityWatts 0 means "not reported" (DMTF mockups), not a 0 W ceiling
        lows: list[tuple[float | None, str]] = []
        highs: list[tuple[float | None, str]] = [
            (number(control.get("PowerCapacityWatts")) or None, "PowerCapacityWatts")
        ]
        # NOTE: iLO's own floor (HpePowerMetricsExt: the lowest cap it can hold the node to)
        lows.append((_hpe_safe_minimum(doc.body), "Oem/Hpe/MinimumSafelyAchievableCap"))
        # NOTE: AMI MegaRAC publishes its cap range in Oem.Vendor.PowerLimit (Min/Max)
        vendor = _ami_limits(control)
        lows.append((number(vendor.get("Min")), "Oem/Vendor/PowerLimit/Min"))
        highs.append((number(vendor.get("Max")), "Oem/Vendor/PowerLimit/Max"))
        more_lows, more_highs = _lenovo_range(control)
        (low, low_name), (high, high_name) = tightest(lows + more_lows, highs + more_highs)
        return LimitReading(
            watts=watts,
            capped=watts is not None,
            min_watts=low,
            min_name=low_name,
            max_watts=high,
            max_name=high_name,
            mode=str(exception) if exception is not None else None,
            power_watts=consumed_watts(control),
            etag=doc.etag,
        )

    def offers(self, component: Component, doc: Document) -> str:
        controls = doc.get("PowerControl")
        member = None
        if isinstance(controls, list) and component.member < len(controls):
            member = controls[component.member]
        if isinstance(member, Mapping) and isinstance(member.get("PowerLimit"), Mapping):
            return ""
        return f"{doc.path.rstrip('/')} shows no PowerControl[{component.member}].PowerLimit"

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        return self._limit(component, int(watts))

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        return self._limit(component, None)

    def guard(
        self, request: CapRequest, component: Component, current: LimitReading, allow_power_off: bool
    ) -> CapRequest | str:
        if current.mode in HARMLESS or allow_power_off:
            return request
        if component.quirk == LIMIT_EXCEPTION:
            return self._limit(component, _watts(request), "NoAction")
        return (
            f"{component.label}: the BMC's LimitException is {current.mode} (the node is powered off "
            "when the load stays above the cap) and this resource does not take NoAction; refused "
            "(inventory option allow_power_off_on_limit = true accepts it)"
        )

    def restore_request(
        self, component: Component, prior: Prior, current: LimitReading, doc: Document
    ) -> CapRequest:
        watts = round(prior.watts) if prior.capped and prior.watts is not None else None
        exception = prior.mode if prior.mode != current.mode and component.quirk == LIMIT_EXCEPTION else None
        return self._limit(component, watts, exception)

    def matches(self, reading: LimitReading, prior: Prior) -> bool:
        return super().matches(reading, prior) and (prior.mode is None or reading.mode == prior.mode)

    def _limit(self, component: Component, value: int | None, exception: str | None = None) -> CapRequest:
        # NOTE: DSP0266 array PATCH: `{}` leaves a member unchanged and a shorter array deletes the
        # rest, so every other PowerControl member is padded with `{}` (redfish.md §1.3).
        members: list[dict[str, Any]] = [{} for _ in range(max(component.members, component.member + 1))]
        limit: dict[str, Any] = {"LimitInWatts": value}
        if exception is not None:
            limit["LimitException"] = exception
        members[component.member] = {"PowerLimit": limit}
        return CapRequest("PATCH", component.limit_uri, {"PowerControl": members})


def _watts(request: CapRequest) -> int | None:
    members = request.body.get("PowerControl") or []
    for member in members:
        limit = member.get("PowerLimit") if isinstance(member, Mapping) else None
        if isinstance(limit, Mapping):
            value = limit.get("LimitInWatts")
            return int(value) if isinstance(value, int | float) else None
    return None


def _lenovo_range(
    control: Mapping[str, Any],
) -> tuple[list[tuple[float | None, str]], list[tuple[float | None, str]]]:
    """Lenovo XCC's capping range in `PowerControl[].Oem.Lenovo.PowerUtilization`: the minimum and
    maximum cap for the limit's mode (`LimitMode` AC or DC: `CapacityMinAC` / `CapacityMaxAC`, …)
    and `MinLimitInWatts` / `MaxLimitInWatts` (Lenovo XCC REST API, "GET /redfish/v1/Chassis/1/Power",
    https://pubs.lenovo.com/xcc-restapi/power_manage_get). 0 is "not reported", never a bound."""
    oem = control.get("Oem")
    lenovo = oem.get("Lenovo") if isinstance(oem, Mapping) else None
    usage = lenovo.get("PowerUtilization") if isinstance(lenovo, Mapping) else None
    if not isinstance(usage, Mapping):
        return [], []
    where = "Oem/Lenovo/PowerUtilization/"
    mode = str(usage.get("LimitMode") or "AC").upper()
    mode = mode if mode in ("AC", "DC") else "AC"
    lows = [(number(usage.get(n)) or None, where + n) for n in (f"CapacityMin{mode}", "MinLimitInWatts")]
    highs = [(number(usage.get(n)) or None, where + n) for n in (f"CapacityMax{mode}", "MaxLimitInWatts")]
    return lows, highs


def _ami_limits(control: Mapping[str, Any]) -> Mapping[str, Any]:
    oem = control.get("Oem")
    vendor = oem.get("Vendor") if isinstance(oem, Mapping) else None
    limits = vendor.get("PowerLimit") if isinstance(vendor, Mapping) else None
    return limits if isinstance(limits, Mapping) else {}


def legacy_capable(power: Document) -> bool:
    """Whether a `Power` resource shows a writable node limit (a `PowerLimit` with `LimitInWatts`)."""
    return _limit_member(power) is not None


#: URI segments of resources that are a part of a node: a PowerControl related only to them limits
#: that part (a CPU, a DIMM), never the node
_PART_SEGMENTS = ("/Processors/", "/Memory/", "/PCIeDevices/", "/Storage/", "/NetworkAdapters/")


def _limit_member(power: Document) -> int | None:
    for i, c in enumerate(power.get("PowerControl") or []):
        if (
            isinstance(c, Mapping)
            and isinstance(c.get("PowerLimit"), Mapping)
            and "LimitInWatts" in c["PowerLimit"]
            and not _part_only(c)
        ):
            return i
    return None


def _part_only(control: Mapping[str, Any]) -> bool:
    """Whether a PowerControl's `RelatedItem` names only parts of the node (see `_PART_SEGMENTS`)."""
    related = [
        str(r.get("@odata.id"))
        for r in control.get("RelatedItem") or ()
        if isinstance(r, Mapping) and isinstance(r.get("@odata.id"), str)
    ]
    return bool(related) and all(any(seg in uri for seg in _PART_SEGMENTS) for uri in related)


# ---- discovery -----------------------------------------------------------------------------------


def discover_legacy(
    base: Discovery,
    chassis: list[Document],
    legacy: tuple[Document, Document] | None,
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    """The node cap in `PowerControl[]` of the chassis `Power` resource; nothing else."""
    node: tuple[Component, ...] = ()
    note, evidence = "no PowerLimit", ""
    member = _limit_member(legacy[1]) if legacy is not None else None
    if legacy is not None and member is None:
        evidence = f"{legacy[1].path}: skipped (no PowerLimit with LimitInWatts for the whole node)"
        controls = [c for c in legacy[1].get("PowerControl") or () if isinstance(c, Mapping)]
        if any(
            isinstance(c.get("PowerLimit"), Mapping) and "LimitInWatts" in c["PowerLimit"] for c in controls
        ):
            note = "the Power resource's limits are related to parts of the node (RelatedItem), not the node"
        else:
            note = (
                "power capping is disabled in the BMC's firmware: its PowerLimit shows no LimitInWatts "
                "(bmcweb leaves it out while capping is disabled and refuses a write with ActionNotSupported)"
            )
    elif legacy is not None and member is not None:
        ch, power = legacy
        controls = list(power.get("PowerControl") or [])
        limit = controls[member]["PowerLimit"]
        quirk = ""
        if "LimitException" in limit:
            allowed = limit.get("LimitException@Redfish.AllowableValues")
            writable = not isinstance(allowed, list) or "NoAction" in allowed
            quirk = LIMIT_EXCEPTION if writable else LIMIT_EXCEPTION_FIXED
        reason = f"the node cap (PowerControl[{member}].PowerLimit of chassis {ch.get('Id') or ch.path})"
        if limit.get("LimitException") not in HARMLESS:
            reason += f"; LimitException {limit.get('LimitException')}"
        node = (
            Component(
                key="node",
                kind="node",
                index=0,
                name=f"PowerControl/{member}",
                mechanism=MECH_LEGACY,
                limit_uri=power.path,
                member=member,
                members=len(controls),
                resource_uri=ch.path,
                quirk=quirk,
                reason=reason,
            ),
        )
        note, evidence = (
            "the legacy Chassis Power resource caps the whole node only",
            f"{power.path}: chosen: {reason}",
        )
    return replace(
        base,
        platform=LEGACY_POWER,
        node=node,
        gpus=tuple(gpus),
        cpus=tuple(cpus),
        node_metrics=generic_node_metrics(chassis, list(node)),
        note=note,
        evidence=(*base.evidence, evidence) if evidence else base.evidence,
    )


async def probe(p: Probe) -> Discovery | None:
    """A chassis Power whose PowerLimit shows LimitInWatts for the whole node (or when asked for)."""
    legacy = await legacy_power_of(p.walker, p.chassis)
    if (legacy is not None and legacy_capable(legacy[1])) or p.hint == LEGACY_POWER:
        found = discover_legacy(p.base, p.chassis, legacy, p.gpus, p.cpus)
        return replace(found, groups=tuple(p.classified.groups))
    return None


async def probe_disabled(p: Probe) -> Discovery | None:
    """A chassis Power with a PowerLimit that cannot be the node's cap: refused with why."""
    legacy = await legacy_power_of(p.walker, p.chassis) if p.hint == AUTO else None
    if legacy is None:
        return None
    return replace(
        discover_legacy(p.base, p.chassis, legacy, p.gpus, p.cpus), groups=tuple(p.classified.groups)
    )


PLATFORM = Platform(
    name="legacy-power",
    matches="Chassis/{id}/Power PowerControl[n].PowerLimit with LimitInWatts, not related to a part only",
    writes='PATCH <Power> {"PowerControl": [{}, …, {"PowerLimit": {"LimitInWatts": N}}]} ({}: the others)',
    restores="the prior LimitInWatts (null: no cap) and LimitException where it was changed",
    probe=probe,
    quirks=(
        "LimitException HardPowerOff: written with NoAction where allowed, else refused",
        "range: the tightest of PowerCapacityWatts, HPE MinimumSafelyAchievableCap, AMI Oem.Vendor, "
        "Lenovo Oem.Lenovo.PowerUtilization",
    ),
    refuses=(
        "GPU and CPU caps: the legacy Chassis Power resource caps the whole node only",
        "a cap outside the tightest published range (PowerCapacityWatts, vendor OEM ranges)",
        "a chassis whose Links.ComputerSystems names another node too (a shared chassis)",
    ),
)
DISABLED = Platform(
    name="legacy-power-disabled",
    matches="Chassis/{id}/Power PowerControl[n].PowerLimit without LimitInWatts, or related to parts only",
    writes="nothing (refused with the reason)",
    restores="nothing",
    probe=probe_disabled,
    refuses=(
        "every cap: capping is disabled in the firmware (no LimitInWatts; bmcweb answers a write with "
        "ActionNotSupported), or the PowerLimit relates to parts only",
    ),
)
