"""Deprecated `Chassis/{id}/Power` `PowerControl[].PowerLimit.LimitInWatts` (Dell, HPE, Supermicro…).

Set: `PATCH {"PowerControl": [{"PowerLimit": {"LimitInWatts": <int>}}]}`; remove: `LimitInWatts: null`.
Node caps only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plugins.redfish._client import Document
from plugins.redfish._layout import LEGACY_POWER, MECH_LEGACY, Component, Discovery, generic_node_metrics
from plugins.redfish._platforms._base import CapRequest, LimitReading, Mechanism, number


class LegacyPowerMechanism(Mechanism):
    """The node cap in `Power.PowerControl[member].PowerLimit`."""

    name = MECH_LEGACY

    def parse(self, component: Component, doc: Document) -> LimitReading:
        controls = doc.get("PowerControl") or []
        control: Mapping[str, Any] = {}
        if component.member < len(controls) and isinstance(controls[component.member], Mapping):
            control = controls[component.member]
        limit = control.get("PowerLimit")
        limit = limit if isinstance(limit, Mapping) else {}
        watts = number(limit.get("LimitInWatts"))
        return LimitReading(
            watts=watts,
            capped=watts is not None,
            # NOTE: Power has no AllowableMin/Max; PowerCapacityWatts bounds what a cap can mean
            # (RP Power.v1_7_3.json), and the BMC validates the rest.
            # NOTE: PowerCapacityWatts 0 means "not reported" (DMTF mockups), not a 0 W ceiling
            max_watts=number(control.get("PowerCapacityWatts")) or None,
            max_name="PowerCapacityWatts",
            power_watts=number(control.get("PowerConsumedWatts")),
            etag=doc.etag,
        )

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        return self._limit(component, int(watts))

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        return self._limit(component, None)

    def _limit(self, component: Component, value: int | None) -> CapRequest:
        # NOTE: DSP0266 array PATCH: `{}` leaves a member unchanged and a shorter array deletes the
        # rest, so every other PowerControl member is padded with `{}` (redfish.md §1.3).
        members: list[dict[str, Any]] = [{} for _ in range(max(component.members, component.member + 1))]
        members[component.member] = {"PowerLimit": {"LimitInWatts": value}}
        return CapRequest("PATCH", component.limit_uri, {"PowerControl": members})


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
    if legacy is not None:
        ch, power = legacy
        controls = list(power.get("PowerControl") or [])
        member = next(i for i, c in enumerate(controls) if isinstance(c, Mapping) and "PowerLimit" in c)
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
            ),
        )
    return replace(
        base,
        platform=LEGACY_POWER,
        node=node,
        gpus=tuple(gpus),
        cpus=tuple(cpus),
        node_metrics=generic_node_metrics(chassis, list(node)),
        note="the legacy Chassis Power resource caps the whole node only" if node else "no PowerLimit",
    )
