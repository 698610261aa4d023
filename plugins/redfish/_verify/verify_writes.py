"""The write cycle of a verification: each writable cap set to a safe value, read back, restored exactly.

Per cap, in order: `read` (the value, range and mode in force), `set` (a value one step below it,
inside the BMC's published range; one step above where that is the minimum), `read-back` (polled
until the BMC reports it, within the read-back window; where the component reports its power, the
reading and how long until it is under the new cap, as evidence), `restore` (the exact previous value and
mode, read back). Whatever step fails, the cap ends restored (the restore runs whenever a write may
have landed) and the check names the step. Every write goes through the plugin's write choke point,
so the request's receipts list them; only the cap's own resource (and its actions) is written.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from plugins.base import DeviceControllerError, WriteOutcome
from plugins.base._health import FAIL, PASS, WARN, HealthCheck, HealthQuery
from plugins.redfish._capping.caps import CapChange, restore_cap, set_cap
from plugins.redfish._device.device import Device
from plugins.redfish._discovery.layout import MECH_CONTROL, Component
from plugins.redfish._platforms import LimitReading, mechanism_for
from plugins.redfish._platforms._base import same_watts
from plugins.redfish._readings import metrics as _metrics
from plugins.redfish._verify.verify import cap_evidence

#: the step below the value in force: this share of the range (at least one Increment, 1 W)
STEP_SHARE = 0.05
NOTE = "restore after the verification's write cycle"


def refusal(device: Device, query: HealthQuery) -> str:
    """Why the write cycle must not run on this device now, or ''."""
    groups = [s for s in device.state.scopes() if s.startswith("rg:")]
    if groups and not query.force_writes:
        names = ", ".join(g[3:] for g in groups)
        return f"resource group {names} is active on this node (force to cycle anyway)"
    return ""


async def write_cycle(device: Device, query: HealthQuery) -> list[HealthCheck]:
    """One `write <key>` check per cap-able component (see the module docstring)."""
    why = refusal(device, query)
    comps = [c for c in device.discovery.components() if c.mechanism]
    if why:
        return [HealthCheck("write", FAIL, f"write cycle refused: {why}")]
    if not comps:
        return [HealthCheck("write", WARN, "write cycle refused: no writable power limit on this node")]
    # one at a time: a node never has more than one cap away from its value
    return [await _cycle(device, comp, query.resolution) for comp in comps]


def safe_value(reading: LimitReading, floor: float) -> tuple[float | None, str]:
    """The value to cycle to, or None and why there is none.

    Inside the BMC's range; where it publishes no minimum, the safety floor (`min_cap_watts`) is the
    minimum, and where it publishes no maximum, only a value below the cap in force is safe.
    """
    if not reading.in_watts:
        return None, f"set points in {reading.units!r}, not watts"
    capped = reading.watts if reading.capped and reading.watts is not None else None
    lo = reading.min_watts if reading.min_watts is not None else floor
    hi = reading.max_watts if reading.max_watts is not None else capped
    if hi is None:
        return None, "the BMC publishes no maximum and holds no cap: no value is known to be safe"
    if hi - lo < 1:
        return None, f"the range {lo:g}..{hi:g} W leaves nothing to change"
    current = min(max(capped if capped is not None else hi, lo), hi)
    step = max(reading.increment or 1.0, 1.0, round((hi - lo) * STEP_SHARE))
    if reading.increment:
        step = round(step / reading.increment) * reading.increment or reading.increment
    value = current - step if current - step >= lo else current + step
    return (value, "") if lo <= value <= hi else (None, f"no step of {step:g} W fits in {lo:g}..{hi:g} W")


async def _cycle(device: Device, comp: Component, window: float) -> HealthCheck:
    name = f"write {comp.key}"
    mech = mechanism_for(comp)
    assert mech is not None
    bmc = device.bmc
    try:
        before = mech.parse(comp, await bmc.get(comp.limit_uri))
    except DeviceControllerError as exc:
        return HealthCheck(
            name, FAIL, f"step read: {exc}", {"resource": comp.limit_uri, "failed_step": "read"}
        )
    evidence: dict[str, Any] = {"before": cap_evidence(comp, before)}
    value, why = safe_value(before, device.settings.min_cap_watts)
    if value is None:
        return HealthCheck(name, WARN, f"refused: {why}", {**evidence, "refused": why})
    evidence["value"] = value
    started = time.monotonic()
    try:
        change = await set_cap(bmc, comp, value)
        failed = ""
        if change.after is None or change.error is not None:
            failed = f"step set: {change.message or 'no read-back'}"
        else:
            seen = await _until_reported(device, comp, change, value, window)
            if seen is None:
                failed = f"step read-back: the BMC did not report {value:g} W within {window:g} s"
            else:
                evidence["report_ms"] = round((seen - started) * 1000, 1)
                evidence["power"] = await _power_response(device, comp, value, window)
        evidence["set_outcome"] = change.write.value
        if change.write is WriteOutcome.NOT_WRITTEN and not change.wrote and failed:
            return HealthCheck(
                name, FAIL, f"{failed}; nothing was written", {**evidence, "failed_step": "set"}
            )
        restored = await _restore(device, comp, before)
    except asyncio.CancelledError:
        # stopped mid-cycle (a controller shutting down, a deadline): the cap is put back first
        await asyncio.shield(_restore(device, comp, before))
        raise
    evidence["restored"] = restored.ok
    if restored.after is not None:
        evidence["after"] = cap_evidence(comp, restored.after)
    if not restored.ok:
        step = failed + "; " if failed else ""
        return HealthCheck(
            name,
            FAIL,
            f"{step}step restore: {restored.message or 'not restored'}",
            {**evidence, "failed_step": "restore"},
        )
    if failed:
        return HealthCheck(
            name, FAIL, f"{failed}; restored", {**evidence, "failed_step": failed.split(":")[0][5:]}
        )
    detail = f"{comp.limit_uri}: set {value:g} W, reported after {evidence['report_ms']:g} ms, restored " + (
        f"{before.watts:g} W" if before.capped and before.watts is not None else "(no cap)"
    )
    return HealthCheck(name, PASS, detail, evidence)


async def _power_response(device: Device, comp: Component, value: float, window: float) -> dict[str, Any]:
    """Where the component reports its power: the reading, and how long until it is under the new
    cap (polled within `window`; evidence only, since an idle component is under it at once)."""
    uris = [u for u in (comp.metrics_uri, comp.limit_uri if comp.mechanism == MECH_CONTROL else "") if u]
    if not uris:
        return {"reading": None, "note": "the BMC reports no power reading for this component"}
    started = time.monotonic()
    until = started + window
    watts: float | None = None
    while True:
        readings = await _metrics.read(device.bmc, uris)
        absent: list[str] = []
        if _metrics.was_read(comp, readings.documents):
            metrics = _metrics.component_metrics(comp, readings.documents, absent)
            watts = None if absent and f"{comp.label} power" in absent else metrics.power_watts
        if watts is None:
            return {"reading": None, "note": "; ".join(readings.errors) or "no power reading"}
        if watts <= value or time.monotonic() >= until:
            under = watts <= value
            ms = round((time.monotonic() - started) * 1000, 1) if under else None
            return {"reading": watts, "under_cap": under, "ms": ms}
        await asyncio.sleep(min(0.1, max(0.0, until - time.monotonic())))


async def _until_reported(
    device: Device, comp: Component, change: CapChange, value: float, window: float
) -> float | None:
    """When the BMC first reported the value (its read-back, else a poll within `window`), or None."""
    if change.ok:
        return time.monotonic()
    mech = mechanism_for(comp)
    assert mech is not None
    until = time.monotonic() + window
    while time.monotonic() < until:
        await asyncio.sleep(min(0.1, max(0.0, until - time.monotonic())))
        try:
            now = mech.parse(comp, await device.bmc.get(comp.limit_uri))
        except DeviceControllerError:
            continue
        if now.capped and now.watts is not None and same_watts(now.watts, round(value)):
            return time.monotonic()
    return None


async def _restore(device: Device, comp: Component, before: LimitReading) -> CapChange:
    """The exact previous value and mode; tried twice (a restore is never left half done)."""
    restored = await restore_cap(device.bmc, comp, before.prior(), note=NOTE)
    if not restored.ok:
        restored = await restore_cap(device.bmc, comp, before.prior(), note=NOTE)
    return restored
