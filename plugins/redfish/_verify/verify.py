"""Is this BMC ready to carry production caps? Read-only checks with pass / warn / fail and evidence.

Order: reachability (the unauthenticated service root), TLS (the certificate the BMC presents),
login and a fresh discovery, the session table, firmware, every cap the node can carry (resource,
range, mode, value, quirk; refusals and why), telemetry (present, moving, under the limits),
latency (GETs of a limit resource at the BMC's concurrency), workload power profiles, and the
in-band GPU limits where the controller passed them. A failed reachability or login skips the rest.
The write cycle (`plugins.redfish._verify.verify_writes`) runs after these when the query asks for it.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from plugins.base import DeviceContext, DeviceControllerError
from plugins.base.health import FAIL, PASS, SKIP, WARN, HealthCheck, HealthQuery
from plugins.redfish._client.pool import BmcPool
from plugins.redfish._config import RedfishSettings
from plugins.redfish._device.device import Device, connect, prepare
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._discovery.layout import Component, members_of
from plugins.redfish._platforms import mechanism_for, unsupported_message
from plugins.redfish._platforms._base import LimitReading, number
from plugins.redfish._readings import metrics as _metrics
from plugins.redfish._verify.verify_gpus import inband, profiles
from plugins.redfish._verify.verify_tls import tls_check

SESSIONS = "/redfish/v1/SessionService/Sessions"
FIRMWARE = "/redfish/v1/UpdateService/FirmwareInventory"
#: firmware inventory entries read at most (a GB200 lists dozens; each is one GET)
MAX_FIRMWARE = 24
#: a reading this far above its limit is inconsistent (sensors and caps are averaged differently)
OVER_LIMIT = 1.10


async def read_only(
    pool: BmcPool, defaults: RedfishSettings, ctx: DeviceContext, query: HealthQuery
) -> tuple[list[HealthCheck], Device | None]:
    """Every read-only check; the prepared device (for the write cycle) when login worked."""
    checks: list[HealthCheck] = []
    client, settings = await connect(pool, defaults, ctx)
    bmc = OpBmc(client, ctx.deadline)
    started = time.monotonic()
    try:
        root = await bmc.ping(attempts=1)
    except DeviceControllerError as exc:
        checks.append(HealthCheck("reachability", FAIL, str(exc), {"url": settings.origin}))
        return _skipped(checks, "the BMC is unreachable"), None
    ms = (time.monotonic() - started) * 1000
    version = str(root.get("RedfishVersion") or "")
    checks.append(
        HealthCheck(
            "reachability",
            PASS,
            f"service root in {ms:.0f} ms",
            {"url": settings.origin, "ms": round(ms, 1), "redfish_version": version},
        )
    )
    checks.append(await tls_check(settings, ctx.remaining()))
    # a fresh discovery: the verification proves the BMC as it is now, not a cached view of it
    fresh = replace(ctx, state={k: v for k, v in ctx.state.items() if k != "discovery"})
    try:
        device = await prepare(pool, defaults, fresh)
        # authenticated (every Redfish service asks for a login here; a proxy may refuse listing
        # sessions): discovery alone may have been served cached
        await device.bmc.get("/redfish/v1/Systems")
    except DeviceControllerError as exc:
        checks.append(HealthCheck("login", FAIL, str(exc), {"username": settings.username}))
        return _skipped(checks, "login failed"), None
    auth = client.auth_mode or "?"
    checks.append(HealthCheck("login", PASS, f"logged in ({auth} auth)", {"auth": auth}))
    checks.append(await _sessions(device))
    checks.append(await _firmware(device, version))
    caps = await _caps(device)
    checks += caps
    limits = {
        c.name[4:]: c.evidence["watts"] for c in caps if c.evidence.get("capped") and c.evidence.get("watts")
    }
    checks.append(await _telemetry(device, query, limits))
    checks.append(await _latency(device, query))
    checks.append(await profiles(device))
    checks.append(await inband(device, query.inband_gpu_limits))
    return checks, device


def _skipped(checks: list[HealthCheck], why: str) -> list[HealthCheck]:
    names = ("tls", "login", "sessions", "firmware", "caps", "telemetry", "latency", "profiles")
    done = {c.name for c in checks}
    return checks + [HealthCheck(n, SKIP, f"not checked: {why}") for n in names if n not in done]


async def _sessions(device: Device) -> HealthCheck:
    """In use, the limit where the BMC publishes one, and whether ours is among them."""
    bmc = device.bmc
    ours = bmc.client.session_uri.rstrip("/")
    try:
        listing = await bmc.get(SESSIONS)
        service = await bmc.get("/redfish/v1/SessionService")
    except DeviceControllerError as exc:
        return HealthCheck("sessions", WARN, f"the session table is unreadable: {exc}")
    members = [m.rstrip("/") for m in members_of(listing)]
    count = number(listing.get("Members@odata.count"))
    in_use = int(count) if count is not None else len(members)
    oem = service.get("Oem") if isinstance(service.get("Oem"), Mapping) else {}
    limit = _first_number(service.body, "MaxSessions", "SessionLimit") or _nested_limit(oem)
    evidence: dict[str, Any] = {
        "in_use": in_use,
        "limit": limit,
        "ours": ours if ours in members else "",
        "timeout_s": number(service.get("SessionTimeout")),
    }
    cap = f" of {limit:g}" if limit else " (the BMC publishes no limit)"
    detail = f"{in_use} session(s) open{cap}; " + (
        "ours among them"
        if ours in members
        else ("basic auth: none of ours" if not ours else "ours not listed")
    )
    if service.get("ServiceEnabled") is False:
        return HealthCheck("sessions", WARN, "the session service is disabled; " + detail, evidence)
    if limit and in_use >= limit:
        return HealthCheck("sessions", FAIL, "the session table is full: " + detail, evidence)
    if (limit and in_use >= limit - 1) or (ours and ours not in members):
        return HealthCheck("sessions", WARN, detail, evidence)
    return HealthCheck("sessions", PASS, detail, evidence)


def _first_number(body: Mapping[str, Any], *names: str) -> float | None:
    for name in names:
        value = number(body.get(name))
        if value:
            return value
    return None


def _nested_limit(oem: Mapping[str, Any]) -> float | None:
    for vendor in oem.values():
        if isinstance(vendor, Mapping):
            value = _first_number(vendor, "MaxSessions", "SessionLimit", "MaximumSessions")
            if value:
                return value
    return None


async def _firmware(device: Device, version: str) -> HealthCheck:
    """The BMC's firmware and Redfish version, and every managed component's firmware listed."""
    disc = device.discovery
    components: dict[str, str] = {}
    note = ""
    try:
        listing = await device.bmc.get(FIRMWARE)
        uris = members_of(listing)
        if len(uris) > MAX_FIRMWARE:
            note = f" (first {MAX_FIRMWARE} of {len(uris)} read)"
        docs = await _metrics.read(device.bmc, uris[:MAX_FIRMWARE])
        for uri in uris[:MAX_FIRMWARE]:
            doc = docs.documents.get(uri)
            if doc is not None:
                components[str(doc.get("Id") or uri.rsplit("/", 1)[-1])] = str(doc.get("Version") or "")
    except DeviceControllerError:
        note = " (no firmware inventory)"
    evidence = {
        "redfish_version": version or disc.redfish_version,
        "bmc_firmware": disc.firmware,
        "vendor": disc.vendor,
        "product": disc.product,
        "platform": disc.platform,
        "components": components,
    }
    detail = f"{disc.vendor or 'BMC'} {disc.firmware or '(firmware not shown)'}, Redfish {version or '?'}"
    detail += f"; {len(components)} component(s) listed{note}"
    return HealthCheck("firmware", PASS if disc.firmware else WARN, detail, evidence)


async def _caps(device: Device) -> list[HealthCheck]:
    """One check per cap-able component (and per refused one, with why); groups are listed only."""
    disc = device.discovery
    out: list[HealthCheck] = []
    comps = disc.components()
    for comp in comps:
        out.append(await _cap(device, comp))
    if not disc.node:
        why = unsupported_message(disc, "node: refused", disc.note)
        out.insert(0, HealthCheck("cap node", WARN, why, {"resource": "", "reason": why}))
    for group in disc.groups:
        detail = f"{group.limit_uri}: limits {group.covers} together; never written as one cap"
        out.append(HealthCheck(f"cap {group.key}", PASS, detail, {"resource": group.limit_uri}))
    if not any(c.mechanism for c in comps):
        return [*out, HealthCheck("caps", FAIL, "no writable power limit on this node", {})]
    return out


async def _cap(device: Device, comp: Component) -> HealthCheck:
    name = f"cap {comp.key}"
    mech = mechanism_for(comp)
    if mech is None:
        why = unsupported_message(device.discovery, f"{comp.label} power limit", comp.reason)
        return HealthCheck(name, WARN, f"refused: {why}", {"resource": "", "reason": comp.reason})
    try:
        doc = await device.bmc.get(comp.limit_uri)
        reading = mech.parse(comp, doc)
    except DeviceControllerError as exc:
        return HealthCheck(name, FAIL, f"{comp.limit_uri}: {exc}", {"resource": comp.limit_uri})
    offered = mech.offers(comp, doc)
    if offered:  # the write gate's first rule: nothing is written where the resource shows no limit
        why = f"refused: {offered}; the write gate writes nothing there"
        return HealthCheck(name, WARN, why, {"resource": comp.limit_uri, "reason": offered})
    evidence = cap_evidence(comp, reading)
    span = f"{_w(reading.min_watts)}..{_w(reading.max_watts)}"
    value = f"{_w(reading.watts)} ({'explicit cap' if reading.capped else 'default'})"
    detail = f"{comp.limit_uri}: {value}, range {span}" + (f", mode {reading.mode}" if reading.mode else "")
    if comp.quirk:
        detail += f", quirk {comp.quirk}"
    if not reading.in_watts:
        return HealthCheck(name, FAIL, f"{detail}; set points in {reading.units!r}, not watts", evidence)
    if reading.min_watts is None or reading.max_watts is None:
        floor = device.settings.min_cap_watts
        return HealthCheck(
            name, WARN, f"{detail}; the BMC publishes no full range (floor {floor:g} W)", evidence
        )
    if (
        reading.capped
        and reading.watts is not None
        and not (reading.min_watts - 1e-9 <= reading.watts <= reading.max_watts + 1e-9)
    ):
        return HealthCheck(name, WARN, f"{detail}; the value in force is outside the range", evidence)
    return HealthCheck(name, PASS, detail, evidence)


def cap_evidence(comp: Component, reading: LimitReading) -> dict[str, Any]:
    """A cap's resource, range, mode, value and quirk, as evidence."""
    return {
        "resource": comp.limit_uri,
        "mechanism": comp.mechanism,
        "watts": reading.watts,
        "capped": reading.capped,
        "min": reading.min_watts,
        "max": reading.max_watts,
        "mode": reading.mode,
        "units": reading.units,
        "quirk": comp.quirk,
        "reason": comp.reason,
        # NVIDIA's PowerLimitPersistency as shown ('' where the mechanism has none): journaled with
        # the prior of a write cycle, which puts it back exactly
        **({"persistency": reading.persistency} if reading.persistency else {}),
    }


async def _telemetry(device: Device, query: HealthQuery, limits: Mapping[str, float]) -> HealthCheck:
    """Node, GPU and CPU power present; a later read moves (or is newer); readings under the limits."""
    disc = device.discovery
    uris = _metrics.sources(disc, [*disc.gpus, *disc.cpus], node=True)
    samples: list[dict[str, float | None]] = []
    stamps: list[dict[str, str]] = []
    errors: list[str] = []
    for i in range(query.samples):
        if i:
            await asyncio.sleep(min(query.interval, device.bmc.remaining() / 4))
        readings = await _metrics.read(device.bmc, uris)
        # each resource that could not be read, named by its component (absent: 404; unknown: else)
        errors += _metrics.failure_notes(disc, [*disc.gpus, *disc.cpus], readings, node=True)
        samples.append(_powers(disc.gpus, disc.cpus, disc, readings.documents))
        stamps.append({u: _stamp(d) for u, d in readings.documents.items() if _stamp(d)})
    first, last = samples[0], samples[-1]
    present = {k: v for k, v in last.items() if v is not None}
    absent = sorted(k for k, v in last.items() if v is None)
    moved = len(samples) > 1 and (any(first.get(k) != v for k, v in last.items()) or stamps[0] != stamps[-1])
    over = _over_limits(limits, present)
    evidence: dict[str, Any] = {
        "readings": present,
        "absent": absent,
        "samples": len(samples),
        "interval_ms": round(query.interval * 1000),
        "moved": moved,
        "over_limit": over,
    }
    if errors:
        return HealthCheck("telemetry", FAIL, "; ".join(dict.fromkeys(errors)), evidence)
    parts = [f"{len(present)} reading(s)"] + ([f"absent: {', '.join(absent)}"] if absent else [])
    if "node" not in present:
        return HealthCheck("telemetry", WARN, "node power not reported; " + "; ".join(parts), evidence)
    if over:
        return HealthCheck("telemetry", WARN, "readings above their limit: " + ", ".join(over), evidence)
    if len(samples) > 1 and not moved:
        return HealthCheck(
            "telemetry", WARN, "; ".join([*parts, "stale: no reading moved between reads"]), evidence
        )
    status = WARN if absent else PASS
    return HealthCheck("telemetry", status, "; ".join([*parts, "fresh" if moved else "one read"]), evidence)


def _powers(
    gpus: Sequence[Component], cpus: Sequence[Component], disc: Any, docs: Mapping[str, Mapping[str, Any]]
) -> dict[str, float | None]:
    out: dict[str, float | None] = {"node": _metrics.node_power(disc, docs)}
    for comp in (*gpus, *cpus):
        found: list[str] = []
        metrics = _metrics.component_metrics(comp, docs, found)
        out[comp.key] = None if f"{comp.label} power" in found else metrics.power_watts
    return out


def _stamp(doc: Mapping[str, Any]) -> str:
    """A timestamp the resource carries for its readings, if any."""
    for holder in (doc, doc.get("PowerWatts"), doc.get("Sensor")):
        if isinstance(holder, Mapping):
            for key in ("ReadingTime", "Timestamp", "LastUpdated"):
                if isinstance(holder.get(key), str):
                    return str(holder[key])
    return ""


def _over_limits(limits: Mapping[str, float], present: Mapping[str, float]) -> list[str]:
    out = []
    for key, watts in present.items():
        limit = limits.get(key)
        if limit and watts > limit * OVER_LIMIT:
            out.append(f"{key} {watts:g} W over its {limit:g} W cap")
    return out


async def _latency(device: Device, query: HealthQuery) -> HealthCheck:
    """N GETs of a limit resource, at most the BMC's concurrency at once, each timed on its own."""
    target = next((c.limit_uri for c in device.discovery.components() if c.limit_uri), "")
    target = target or device.discovery.node_metrics[1] or "/redfish/v1/Systems"
    bmc = device.bmc
    slots = asyncio.Semaphore(device.settings.concurrency)

    async def one() -> float:
        async with slots:  # a GET waiting for the client's slot would time our queue, not the BMC
            started = time.monotonic()
            await bmc.get(target)
            return (time.monotonic() - started) * 1000

    try:
        times = sorted(await asyncio.gather(*(one() for _ in range(query.latency_samples))))
    except DeviceControllerError as exc:
        return HealthCheck("latency", FAIL, f"{target}: {exc}", {"resource": target})
    p95 = times[min(len(times) - 1, max(0, math.ceil(0.95 * len(times)) - 1))]
    evidence = {
        "resource": target,
        "samples": len(times),
        "concurrency": device.settings.concurrency,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(times[-1], 1),
        "threshold_ms": query.latency_p95_ms,
    }
    detail = (
        f"{len(times)} GETs of {target} at concurrency {device.settings.concurrency}: p50 "
        f"{evidence['p50_ms']:g} ms, p95 {evidence['p95_ms']:g} ms, max {evidence['max_ms']:g} ms "
        f"(threshold p95 {query.latency_p95_ms:g} ms)"
    )
    return HealthCheck("latency", latency_status(p95, query.latency_p95_ms), detail, evidence)


def latency_status(p95_ms: float, threshold_ms: float) -> str:
    """Under the threshold: pass; up to twice it: warn; beyond: fail."""
    return PASS if p95_ms <= threshold_ms else WARN if p95_ms <= 2 * threshold_ms else FAIL


def _w(value: float | None) -> str:
    return "?" if value is None else f"{value:g} W"
