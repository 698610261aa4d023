"""DMTF `Control` resources (`Chassis/{id}/Controls/{id}`, `ControlType: Power`): node and component caps.

Set: `PATCH {"SetPoint": <int>, "ControlMode": "Manual"}`; remove: `{"SetPoint": null, "ControlMode":
"Disabled"}` (Lenovo XCC requires null and Disabled together, redfish.md §1.1); restore puts back the
prior `SetPoint` and `ControlMode` exactly.

HPE Cray EX node controllers (matched by what their Controls show: the non-DMTF `SettingRangeMin` /
`SettingRangeMax` bounds and an `Oem.Hpe` block; their service root has no Vendor/Product) take caps
as `{"SetPoint": N, "ControlMode": "Automatic"}` and remove them with `{"ControlMode": "Disabled"}`
alone, as HPE's own power service writes them (Cray-HPE/hms-power-control
`internal/domain/power-cap.go`, `generatePowerCapPayload`); a null SetPoint is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from plugins.redfish._discovery.layout import (
    AUTO,
    CONTROLS,
    MECH_CONTROL,
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
    set_point_in_force,
    tightest,
)
from plugins.redfish._platforms.legacy_power import discover_legacy, legacy_capable
from plugins.redfish._platforms.platform import ControlCaps, Platform, Probe
from plugins.redfish._wire.document import Document

RESET_TO_DEFAULTS = "#Control.ResetToDefaults"
CLIENT_MODES = ("Manual", "Override")
HPE_CRAY_EX = "hpe-cray-ex"


def control_quirk(control: Mapping[str, object]) -> str:
    """The vendor behaviour a Control shows ('' for DMTF's): HPE Cray EX (see the module docstring)."""
    oem = control.get("Oem")
    if "SettingRangeMax" in control and isinstance(oem, Mapping) and "Hpe" in oem:
        return HPE_CRAY_EX
    return ""


def cap_mode(component: Component, reading: LimitReading) -> str:
    """The ControlMode a cap is written with: the vendor quirk, else what the Control allows
    (`ControlMode@Redfish.AllowableValues`), preferring the mode already in force, then Manual."""
    if component.cap_mode:
        return component.cap_mode
    allowed = reading.modes
    if reading.mode in CLIENT_MODES and (not allowed or reading.mode in allowed):
        return reading.mode
    for mode in ("Manual", "Override", "Automatic"):
        if not allowed or mode in allowed:
            return mode
    return "Manual"


class ControlMechanism(Mechanism):
    """Caps in DMTF `Control` resources with `SetPointType: Single`."""

    name = MECH_CONTROL
    writes = ("SetPoint", "ControlMode")
    actions = {RESET_TO_DEFAULTS: frozenset()}

    def parse(self, component: Component, doc: Document) -> LimitReading:
        body = doc.body
        # NOTE: Disabled is no cap whatever SetPoint still shows (HPE Cray EX keeps the last one)
        set_point = set_point_in_force(body)
        mode = body.get("ControlMode")
        sensor = body.get("Sensor")
        reading = number(sensor.get("Reading")) if isinstance(sensor, dict) else None
        modes = body.get("ControlMode@Redfish.AllowableValues")
        modes = tuple(str(m) for m in modes) if isinstance(modes, list) else ()
        shown = LimitReading(set_point, False, mode=str(mode) if mode is not None else None, modes=modes)
        # "Automatic" is usually the BMC managing its own default and Manual/Override a client's
        # cap; where caps are written in Automatic (quirk, or the only mode allowed) it is a cap too
        client_modes = {*CLIENT_MODES, cap_mode(component, shown), None}
        # NOTE: HPE Cray EX publishes its bounds as SettingRangeMin/Max (not DMTF AllowableMin/Max);
        # where a Control shows both, the tightest of them stands
        (low, low_name), (high, high_name) = tightest(
            [(number(body.get(n)), n) for n in ("AllowableMin", "SettingRangeMin")],
            [(limit_watts(body.get(n)), n) for n in ("AllowableMax", "SettingRangeMax")],
        )
        return LimitReading(
            watts=set_point,
            capped=set_point is not None and mode in client_modes and mode != "Disabled",
            modes=modes,
            min_watts=low,
            max_watts=high,
            min_name=low_name,
            max_name=high_name,
            default_watts=number(body.get("DefaultSetPoint")),
            increment=number(body.get("Increment")),
            units=str(body.get("SetPointUnits") or "W"),
            mode=str(mode) if mode is not None else None,
            power_watts=reading,
            etag=doc.etag,
        )

    def offers(self, component: Component, doc: Document) -> str:
        where = doc.path.rstrip("/")
        if doc.get("ControlType") != "Power":
            return f"{where} is not a power Control (ControlType {doc.get('ControlType')})"
        if "SetPoint" not in doc.body:
            return f"{where} shows no SetPoint: the BMC offers no limit there"
        return ""

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        if current.mode is None and not component.cap_mode:
            # NOTE: a Control that shows no ControlMode is written its SetPoint alone
            return CapRequest("PATCH", component.limit_uri, {"SetPoint": int(watts)})
        mode = cap_mode(component, current)
        return CapRequest("PATCH", component.limit_uri, {"SetPoint": int(watts), "ControlMode": mode})

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        if component.quirk == HPE_CRAY_EX:
            return CapRequest("PATCH", component.limit_uri, {"ControlMode": "Disabled"})
        actions = doc.get("Actions")
        reset = actions.get(RESET_TO_DEFAULTS) if isinstance(actions, dict) else None
        if current.default_watts is not None and isinstance(reset, dict) and reset.get("target"):
            return CapRequest("POST", str(reset["target"]), {}, if_match=False)
        return self._no_cap(component, doc)

    def _no_cap(self, component: Component, doc: Document) -> CapRequest:
        """No cap: a null SetPoint with Disabled (Lenovo XCC wants both), the SetPoint alone where
        the Control shows no ControlMode."""
        if "ControlMode" not in doc.body:
            return CapRequest("PATCH", component.limit_uri, {"SetPoint": None})
        return CapRequest("PATCH", component.limit_uri, {"SetPoint": None, "ControlMode": "Disabled"})

    def restore_request(
        self, component: Component, prior: Prior, current: LimitReading, doc: Document
    ) -> CapRequest:
        if prior.watts is None or prior.mode == "Disabled":
            if component.quirk == HPE_CRAY_EX:
                # NOTE: the firmware takes Disabled alone and sets SetPoint 0 itself (what was read)
                return CapRequest("PATCH", component.limit_uri, {"ControlMode": "Disabled"})
            return self._no_cap(component, doc)
        body: dict[str, object] = {"SetPoint": round(prior.watts)}
        # the prior ControlMode, exactly; none where the first GET showed none
        if prior.mode:
            body["ControlMode"] = prior.mode
        return CapRequest("PATCH", component.limit_uri, body)

    def matches(self, reading: LimitReading, prior: Prior) -> bool:
        if prior.watts is None or prior.mode == "Disabled":
            return reading.watts is None or reading.mode == "Disabled"
        same_mode = prior.mode is None or reading.mode == prior.mode
        return same_mode and reading.watts is not None and abs(reading.watts - prior.watts) <= 0.5


# ---- discovery -----------------------------------------------------------------------------------


def discover_controls(
    base: Discovery,
    chassis: list[Document],
    caps: ControlCaps,
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    """Caps from the classified Controls (`_platforms.classify`); nothing else is written."""
    node = (caps.node,) if caps.node is not None else ()

    def placed(c: Component) -> Component:
        found = caps.components.get(c.key)
        if found is not None:
            return found
        shared = [g for g in caps.groups if c.key in g.covers.split(",")]
        if shared:
            group = shared[0]
            why = (
                f"its limit {group.name} is shared with {group.covers}: a group budget, never one "
                f"{c.kind.upper()}'s cap"
            )
            return replace(c, reason=why)
        why = caps.why_not.get(c.kind) or f"no power Control relates to this {c.kind.upper()}"
        return replace(c, reason=why)

    return replace(
        base,
        platform=CONTROLS,
        node=node,
        gpus=tuple(placed(c) for c in gpus),
        cpus=tuple(placed(c) for c in cpus),
        groups=tuple(caps.groups),
        node_metrics=generic_node_metrics(chassis, node),
        note="" if node else "no Power Control on this BMC is the node's own cap",
    )


async def probe(p: Probe) -> Discovery | None:
    """The power Controls `classify` placed, when asked for or when any is one component's own cap;
    where none is the node's, a capable legacy Power limit stands in for the node cap."""
    if not (p.hint == CONTROLS or (p.hint == AUTO and p.classified.usable)):
        return None
    found = discover_controls(p.base, p.chassis, p.classified, p.gpus, p.cpus)
    legacy = await legacy_power_of(p.walker, p.chassis) if p.hint == AUTO and not found.node else None
    if legacy is not None and legacy_capable(legacy[1]):
        # Controls for processors only: the node cap may still be the legacy Power limit
        node = discover_legacy(p.base, p.chassis, legacy, p.gpus, p.cpus)
        return replace(found, node=node.node, note="", evidence=node.evidence)
    return found


PLATFORM = Platform(
    name="dmtf-controls",
    matches=(
        "a Chassis/{id}/Controls member with ControlType Power and a SetPoint, related (RelatedItem, "
        "PhysicalContext) to the node or to exactly one GPU or CPU"
    ),
    writes=(
        'PATCH <Control> {"SetPoint": N, "ControlMode": <the mode it allows>} (SetPoint alone where the '
        "Control shows no ControlMode)"
    ),
    restores="the prior SetPoint and ControlMode exactly; no cap: SetPoint null (+ Disabled where shown)",
    probe=probe,
    quirks=(
        "HPE Cray EX: SettingRangeMin/Max bounds, caps in Automatic, Disabled alone (hms-power-control)",
        "Lenovo XCC: null SetPoint and Disabled together (redfish.md §1.1)",
    ),
    refuses=(
        "a GPU or CPU cap no Control relates to (RelatedItem, PhysicalContext), or whose Control names no "
        "RelatedItem while the node has several of that kind",
        "a Control related to several components or with a non-node context: a group budget, never a cap",
        "a SetPoint outside AllowableMin/Max (HPE Cray EX: SettingRangeMin/Max)",
    ),
)
