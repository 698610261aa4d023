"""DMTF `Control` resources (`Chassis/{id}/Controls/{id}`, `ControlType: Power`): node and component caps.

Set: `PATCH {"SetPoint": <int>, "ControlMode": "Manual"}`; remove: `{"SetPoint": null, "ControlMode":
"Disabled"}` (Lenovo XCC requires null and Disabled together, redfish.md §1.1); restore puts back the
prior `SetPoint` and `ControlMode` exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from plugins.redfish._client import Document
from plugins.redfish._layout import CONTROLS, MECH_CONTROL, Component, Discovery, generic_node_metrics
from plugins.redfish._platforms._base import CapRequest, LimitReading, Mechanism, Prior, number

RESET_TO_DEFAULTS = "#Control.ResetToDefaults"
CLIENT_MODES = ("Manual", "Override")

#: vendors whose power Controls hold a client's cap in `ControlMode: Automatic`, matched on the
#: service root's `Vendor` and a `Product` substring (case-insensitive). HPE Cray EX sets caps with
#: `{"ControlMode": "Automatic", "SetPoint": N}` (Cray-HPE hms-capmc tests; Cray-HPE docs-csm #1106).
QUIRKS: tuple[tuple[str, str, str], ...] = (("HPE", "Cray", "Automatic"),)


def quirk_mode(vendor: str, product: str) -> str:
    """The ControlMode a vendor's caps are written with ('' when the DMTF default applies)."""
    for q_vendor, q_product, mode in QUIRKS:
        if vendor.strip().lower() == q_vendor.lower() and q_product.lower() in product.lower():
            return mode
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

    def parse(self, component: Component, doc: Document) -> LimitReading:
        body = doc.body
        set_point = number(body.get("SetPoint"))
        mode = body.get("ControlMode")
        sensor = body.get("Sensor")
        reading = number(sensor.get("Reading")) if isinstance(sensor, dict) else None
        modes = body.get("ControlMode@Redfish.AllowableValues")
        modes = tuple(str(m) for m in modes) if isinstance(modes, list) else ()
        shown = LimitReading(set_point, False, mode=str(mode) if mode is not None else None, modes=modes)
        # "Automatic" is usually the BMC managing its own default and Manual/Override a client's
        # cap; where caps are written in Automatic (quirk, or the only mode allowed) it is a cap too
        client_modes = {*CLIENT_MODES, cap_mode(component, shown), None}
        return LimitReading(
            watts=set_point,
            capped=set_point is not None and mode in client_modes,
            modes=modes,
            min_watts=number(body.get("AllowableMin")),
            max_watts=number(body.get("AllowableMax")),
            default_watts=number(body.get("DefaultSetPoint")),
            increment=number(body.get("Increment")),
            units=str(body.get("SetPointUnits") or "W"),
            mode=str(mode) if mode is not None else None,
            power_watts=reading,
            etag=doc.etag,
        )

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        mode = cap_mode(component, current)
        return CapRequest("PATCH", component.limit_uri, {"SetPoint": int(watts), "ControlMode": mode})

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        actions = doc.get("Actions")
        reset = actions.get(RESET_TO_DEFAULTS) if isinstance(actions, dict) else None
        if current.default_watts is not None and isinstance(reset, dict) and reset.get("target"):
            return CapRequest("POST", str(reset["target"]), {}, if_match=False)
        return CapRequest("PATCH", component.limit_uri, {"SetPoint": None, "ControlMode": "Disabled"})

    def restore_request(
        self, component: Component, prior: Prior, current: LimitReading, doc: Document
    ) -> CapRequest:
        if prior.watts is None or prior.mode == "Disabled":
            return CapRequest("PATCH", component.limit_uri, {"SetPoint": None, "ControlMode": "Disabled"})
        body: dict[str, object] = {"SetPoint": round(prior.watts)}
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
    controls: list[tuple[Document, Document]],
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    """Power Controls: GPU/CPU caps by `RelatedItem`, the node cap from the first other one."""
    by_uri = {c.resource_uri: c for c in gpus + cpus}
    mode = quirk_mode(base.vendor, base.product)
    node: list[Component] = []
    updated: dict[str, Component] = {}
    for ch, control in controls:
        related = [
            str(item.get("@odata.id"))
            for item in control.get("RelatedItem") or ()
            if isinstance(item, Mapping)
        ]
        target = next((by_uri[r] for r in related if r in by_uri), None)
        if target is not None:
            updated[target.key] = replace(
                target, mechanism=MECH_CONTROL, limit_uri=control.path, cap_mode=mode
            )
        elif not node:
            node.append(
                Component(
                    key="node",
                    kind="node",
                    index=0,
                    name=str(control.get("Id") or ""),
                    mechanism=MECH_CONTROL,
                    limit_uri=control.path,
                    resource_uri=ch.path,
                    cap_mode=mode,
                )
            )
    return replace(
        base,
        platform=CONTROLS,
        node=tuple(node),
        gpus=tuple(updated.get(c.key, c) for c in gpus),
        cpus=tuple(updated.get(c.key, c) for c in cpus),
        node_metrics=generic_node_metrics(chassis, node),
        note="" if node else "no node-level Power Control on this BMC",
    )
