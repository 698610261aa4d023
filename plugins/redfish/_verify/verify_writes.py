"""The write cycle of a verification: each writable cap set to a safe value, read back, restored exactly.

Per cap, in order: `read` (the value, range and mode in force), `set` (a value one step below it,
inside the BMC's published range; one step above where that is the minimum), `read-back` (polled
until the BMC reports it, within the read-back window; where the component reports its power, the
reading and how long until it is under the new cap, as evidence), `restore` (the exact previous value and
mode, read back). Whatever step fails, the cap ends restored (the restore runs whenever a write may
have landed) and the check names the step. Every write goes through the plugin's write choke point,
so the request's receipts list them; only the cap's own resource (and its actions) is written.

The restore runs under its own deadline (`RESTORE_SECONDS`), never the request's, and a cancel
waits for it, except the one that hands the device on (`plugins.base.RELINQUISHED`: the caller's
shard lease lapsed), which cuts it and starts none: the journal's next holder restores the node,
and a write of ours would land beside its own. Run by the controller, a cycle is a journaled
transaction (`HealthQuery.apply`, `priors`, `restore`): the previous values come from its journal,
never from a read that could be a leftover test value, and `restore_priors` puts back an
interrupted cycle's journal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from plugins.base import DeviceControllerError, WriteOutcome
from plugins.base.health import FAIL, PASS, WARN, HealthCheck, HealthQuery, relinquished, uncancelled
from plugins.redfish._capping.caps import CapChange, restore_cap, set_cap
from plugins.redfish._device.device import Device
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._discovery.layout import MECH_CONTROL, Component
from plugins.redfish._platforms import LimitReading, mechanism_for
from plugins.redfish._platforms._base import Prior, same_watts
from plugins.redfish._readings import metrics as _metrics
from plugins.redfish._verify.verify import cap_evidence

#: the step below the value in force: this share of the range (at least one Increment, 1 W)
STEP_SHARE = 0.05
NOTE = "restore after the verification's write cycle"
RECOVERY_NOTE = "restore an interrupted write cycle from its journal"
#: a restore's own deadline (the request's may have passed: that is when a restore matters most)
RESTORE_SECONDS = 60.0


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
    if not query.apply:
        # one at a time: a node never has more than one cap away from its value
        return [await _cycle(device, comp, query.resolution) for comp in comps]
    out = []
    for comp in comps:
        journaled = query.priors.get(comp.key)
        if journaled is None:
            why = "not in the write cycle's journal (its value was not read before the cycle)"
            out.append(HealthCheck(f"write {comp.key}", WARN, f"refused: {why}", {"refused": why}))
            continue
        out.append(await _cycle(device, comp, query.resolution, Prior.from_json(journaled)))
    return out


async def restore_priors(device: Device, restore: Mapping[str, Mapping[str, Any]]) -> list[HealthCheck]:
    """Put back each journaled prior (an interrupted write cycle): one `restore KEY` check each."""
    comps = {c.key: c for c in device.discovery.components()}
    out = []
    for key, data in restore.items():
        prior = Prior.from_json(data)
        wanted = _prior_text(prior)
        comp = comps.get(key)
        evidence: dict[str, Any] = {"prior": prior.to_json(), "restored": False}
        if comp is None or mechanism_for(comp) is None:
            why = f"restore {key}: no writable power limit {key} on this node now; it was {wanted}"
            out.append(HealthCheck(f"restore {key}", FAIL, why, evidence))
            continue
        evidence["resource"] = comp.limit_uri
        restored = await _restore(device, comp, prior, note=RECOVERY_NOTE)
        evidence["restored"] = restored.ok
        evidence["set_outcome"] = restored.write.value
        if restored.after is not None:
            evidence["after"] = cap_evidence(comp, restored.after)
        if restored.ok:
            detail = f"{comp.limit_uri}: restored to {wanted}"
            out.append(HealthCheck(f"restore {key}", PASS, detail, evidence))
        else:
            detail = f"{comp.limit_uri}: NOT restored to {wanted}: {restored.message or 'not read back'}"
            out.append(HealthCheck(f"restore {key}", FAIL, detail, evidence))
    return out


def _prior_text(prior: Prior) -> str:
    value = f"{prior.watts:g} W" if prior.watts is not None else "no value"
    if not prior.capped:
        if prior.watts is None:
            return "no cap"
        return f"no explicit cap ({prior.mode or 'default'}, {value})"
    if prior.mode:
        value += f" ({prior.mode})"
    return value


def safe_value(reading: LimitReading, floor: float) -> tuple[float | None, str]:
    """The value to cycle to, or None and why there is none.

    Inside the BMC's range; where it publishes no minimum, the safety floor (`min_cap_watts`) is the
    minimum, and where it publishes no maximum, only a value below the one in force is safe. The
    value in force is the set point the BMC shows, whatever its mode: an `Automatic` limit showing a
    value is stepped from that value, never read as "no cap" (stepping from the maximum would raise
    the limit).
    """
    if not reading.in_watts:
        return None, f"set points in {reading.units!r}, not watts"
    in_force = reading.watts
    lo = reading.min_watts if reading.min_watts is not None else floor
    hi = reading.max_watts if reading.max_watts is not None else in_force
    if hi is None:
        return None, "the BMC publishes no maximum and holds no cap: no value is known to be safe"
    if hi - lo < 1:
        return None, f"the range {lo:g}..{hi:g} W leaves nothing to change"
    current = min(max(in_force if in_force is not None else hi, lo), hi)
    step = max(reading.increment or 1.0, 1.0, round((hi - lo) * STEP_SHARE))
    if reading.increment:
        step = round(step / reading.increment) * reading.increment or reading.increment
    value = current - step if current - step >= lo else current + step
    return (value, "") if lo <= value <= hi else (None, f"no step of {step:g} W fits in {lo:g}..{hi:g} W")


async def _cycle(
    device: Device, comp: Component, window: float, journaled: Prior | None = None
) -> HealthCheck:
    name = f"write {comp.key}"
    mech = mechanism_for(comp)
    assert mech is not None
    bmc = device.bmc
    try:
        before = mech.parse(comp, await bmc.get(comp.limit_uri))
    except DeviceControllerError as exc:
        return HealthCheck(
            name,
            FAIL,
            f"step read: {exc}",
            {"resource": comp.limit_uri, "failed_step": "read", "wrote": False},
        )
    evidence: dict[str, Any] = {"before": cap_evidence(comp, before), "wrote": False}
    if journaled is not None and not mech.matches(before, journaled):
        why = (
            f"the value in force changed since the cycle was journaled ({_prior_text(journaled)}, "
            f"now {_prior_text(before.prior())}): nothing written"
        )
        return HealthCheck(name, WARN, f"refused: {why}", {**evidence, "refused": why})
    prior = journaled if journaled is not None else before.prior()
    value, why = safe_value(before, device.settings.min_cap_watts)
    if value is None:
        return HealthCheck(name, WARN, f"refused: {why}", {**evidence, "refused": why})
    evidence["value"] = value
    started = time.monotonic()
    change: CapChange | None = None
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
        evidence["wrote"] = change.wrote or change.write is not WriteOutcome.NOT_WRITTEN
        if change.write is WriteOutcome.NOT_WRITTEN and not change.wrote and failed:
            return HealthCheck(
                name, FAIL, f"{failed}; nothing was written", {**evidence, "failed_step": "set"}
            )
    except asyncio.CancelledError as exc:
        # stopped mid-cycle (a controller shutting down, a deadline): the cap is put back first,
        # under the restore's own deadline, and the cancel waits for it; never once the device is
        # handed on (its next holder restores the journal: a restore of ours would write beside it)
        if not relinquished(exc):
            await uncancelled(_restore(device, comp, prior))
        raise
    except DeviceControllerError as exc:
        # the set (or a read after it) raised past the deadline or a cut connection: restore anyway
        evidence["wrote"] = True if change is None else evidence["wrote"]
        failed = f"step {'set' if change is None else 'read-back'}: {exc}"
    # NOTE: a cancel that lands now (the request's deadline, just after the plugin's own) waits
    # for the restore: cut on the wire, its write would be one more that may have landed
    restored = await uncancelled(_restore(device, comp, prior))
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
        # NOTE: a test write whose answer was lost may land after this restore read the prior
        # value in force: it is back for now, not for sure (the controller reads it again later)
        unsure = change is None or change.write is WriteOutcome.UNKNOWN
        back = (
            "restored for now (the test write's answer was lost: it may still land)" if unsure else "restored"
        )
        return HealthCheck(
            name, FAIL, f"{failed}; {back}", {**evidence, "failed_step": failed.split(":")[0][5:]}
        )
    detail = (
        f"{comp.limit_uri}: set {value:g} W, reported after {evidence['report_ms']:g} ms, restored "
        + _prior_text(prior)
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


async def _restore(device: Device, comp: Component, prior: Prior, *, note: str = NOTE) -> CapChange:
    """The exact previous value and mode; tried twice (a restore is never left half done), under
    its own deadline: the request's may have passed (a slow BMC answering the test write)."""
    own = OpBmc(device.bmc.client, time.monotonic() + RESTORE_SECONDS)
    own.etag_policy = device.bmc.etag_policy
    own.persistent = device.bmc.persistent
    own.allow_power_off = device.bmc.allow_power_off
    restored = await restore_cap(own, comp, prior, note=note)
    if not restored.ok:
        restored = await restore_cap(own, comp, prior, note=note)
    return restored
