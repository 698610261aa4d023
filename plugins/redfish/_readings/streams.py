"""Fingerprint and stats streams (Nomad-shaped): inventory, health and power readings of every target.

Streams receive device targets, not device state, so they use the in-process discovery cache of
each BMC (discovering when it is empty). A failing BMC shows up as an unhealthy node device (and
no stats) in the stream; it never ends the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from plugins.base import (
    DEVICE_TYPE_GPU,
    DEVICE_TYPE_NODE,
    Attribute,
    Device,
    DeviceContext,
    DeviceControllerError,
    DeviceGroup,
    DeviceGroupStats,
    DeviceStats,
    DeviceTarget,
    FingerprintResponse,
    StatObject,
    StatsResponse,
    StatValue,
)
from plugins.redfish._client.pool import BmcPool
from plugins.redfish._config import RedfishSettings
from plugins.redfish._device.device import Device as Prepared
from plugins.redfish._device.device import prepare
from plugins.redfish._readings import metrics as _metrics

#: how often the fingerprint stream re-reads inventory and health
FINGERPRINT_INTERVAL = 60.0
#: time allowed for one target's reads in a stream pass
STREAM_DEADLINE = 30.0


async def fingerprint(
    pool: BmcPool,
    settings: RedfishSettings,
    targets: Sequence[DeviceTarget],
    *,
    interval: float = FINGERPRINT_INTERVAL,
) -> AsyncIterator[FingerprintResponse]:
    """Yield the device groups now, then again whenever inventory or health changes."""
    last: tuple[DeviceGroup, ...] | None = None
    while True:
        groups = await _inventory(pool, settings, targets)
        if groups != last:
            last = groups
            yield FingerprintResponse(groups)
        await asyncio.sleep(interval)


async def stats(
    pool: BmcPool, settings: RedfishSettings, targets: Sequence[DeviceTarget], interval: float
) -> AsyncIterator[StatsResponse]:
    """Yield per-device readings every `interval` seconds."""
    while True:
        started = time.monotonic()
        yield StatsResponse(await _readings(pool, settings, targets))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


async def _prepared(pool: BmcPool, settings: RedfishSettings, target: DeviceTarget) -> Prepared:
    ctx = DeviceContext(
        device_id=target.device_id,
        model=target.model,
        endpoint=target.endpoint,
        deadline=time.monotonic() + STREAM_DEADLINE,
    )
    return await prepare(pool, settings, ctx)


async def _inventory(
    pool: BmcPool, settings: RedfishSettings, targets: Sequence[DeviceTarget]
) -> tuple[DeviceGroup, ...]:
    per_target = await asyncio.gather(*(_target_inventory(pool, settings, t) for t in targets))
    nodes: list[Device] = []
    node_attrs: dict[str, Attribute] = {}
    gpu_groups: dict[tuple[str, str], list[Device]] = {}
    for node, gpus, attrs in per_target:
        nodes.append(node)
        node_attrs.update(attrs)
        for (vendor, model), devices in gpus.items():
            gpu_groups.setdefault((vendor, model), []).extend(devices)
    groups = [
        DeviceGroup("redfish", DEVICE_TYPE_NODE, "bmc", tuple(nodes), node_attrs if len(targets) == 1 else {})
    ]
    for (vendor, model), devices in sorted(gpu_groups.items()):
        groups.append(DeviceGroup(vendor, DEVICE_TYPE_GPU, model, tuple(devices)))
    return tuple(groups)


async def _target_inventory(
    pool: BmcPool, settings: RedfishSettings, target: DeviceTarget
) -> tuple[Device, dict[tuple[str, str], list[Device]], dict[str, Attribute]]:
    try:
        device = await _prepared(pool, settings, target)
        disc = device.discovery
        docs = await _metrics.read(device.bmc, [g.resource_uri for g in disc.gpus if g.resource_uri])
    except DeviceControllerError as exc:
        return Device(target.device_id, False, str(exc)), {}, {}
    gpus: dict[tuple[str, str], list[Device]] = {}
    for gpu in disc.gpus:
        doc = docs.documents.get(gpu.resource_uri)
        healthy, why = _health(doc)
        model = gpu.model or str((doc or {}).get("Model") or "GPU")
        vendor = str((doc or {}).get("Manufacturer") or disc.vendor or "unknown").lower()
        gpus.setdefault((vendor, model), []).append(
            Device(f"{target.device_id}/gpu/{gpu.index}", healthy, why)
        )
    attrs = {
        "platform": Attribute(disc.platform),
        "firmware": Attribute(disc.firmware),
        "redfish_version": Attribute(disc.redfish_version),
        "gpus": Attribute(len(disc.gpus)),
        "cpus": Attribute(len(disc.cpus)),
    }
    node_ok = not docs.errors
    return Device(target.device_id, node_ok, "; ".join(docs.errors)), gpus, attrs


async def _readings(
    pool: BmcPool, settings: RedfishSettings, targets: Sequence[DeviceTarget]
) -> tuple[DeviceGroupStats, ...]:
    per_target = await asyncio.gather(*(_target_readings(pool, settings, t) for t in targets))
    nodes: dict[str, DeviceStats] = {}
    gpus: dict[str, DeviceStats] = {}
    for node, gpu_stats in per_target:
        nodes.update(node)
        gpus.update(gpu_stats)
    return (
        DeviceGroupStats("redfish", DEVICE_TYPE_NODE, "bmc", nodes),
        DeviceGroupStats("redfish", DEVICE_TYPE_GPU, "gpu", gpus),
    )


async def _target_readings(
    pool: BmcPool, settings: RedfishSettings, target: DeviceTarget
) -> tuple[dict[str, DeviceStats], dict[str, DeviceStats]]:
    try:
        device = await _prepared(pool, settings, target)
    except DeviceControllerError:
        return {}, {}
    disc = device.discovery
    readings = await _metrics.read(device.bmc, _metrics.sources(disc, [*disc.gpus, *disc.cpus], node=True))
    now = datetime.now(UTC)
    node: dict[str, DeviceStats] = {}
    power = _metrics.node_power(disc, readings.documents)
    if power is not None:
        node[target.device_id] = DeviceStats(
            StatValue(float_numerator=power, unit="W", desc="node power"),
            StatObject(attributes={"power": StatValue(float_numerator=power, unit="W")}),
            now,
        )
    gpus: dict[str, DeviceStats] = {}
    for gpu in disc.gpus:
        absent: list[str] = []
        m = _metrics.component_metrics(gpu, readings.documents, absent)
        if gpu.metrics_uri not in readings.documents or f"{gpu.label} power" in absent:
            continue  # no reading: no statistic (never a 0 W one)
        gpus[f"{target.device_id}/gpu/{gpu.index}"] = DeviceStats(
            StatValue(
                float_numerator=m.power_watts,
                float_denominator=m.limit_watts or None,
                unit="W",
                desc="power of limit",
            ),
            StatObject(
                attributes={
                    "power": StatValue(float_numerator=m.power_watts, unit="W"),
                    "energy": StatValue(float_numerator=m.energy_joules, unit="J"),
                    "limit": StatValue(float_numerator=m.limit_watts, unit="W"),
                    "limit_min": StatValue(float_numerator=m.min_watts, unit="W"),
                    "limit_max": StatValue(float_numerator=m.max_watts, unit="W"),
                    "temperature": StatValue(float_numerator=m.temperature_celsius, unit="C"),
                }
            ),
            now,
        )
    return node, gpus


def _health(doc: Mapping[str, Any] | None) -> tuple[bool, str]:
    if doc is None:
        return False, "inventory could not be read"
    status = doc.get("Status")
    if not isinstance(status, Mapping):
        return True, ""
    health = str(status.get("Health") or "OK")
    state = str(status.get("State") or "Enabled")
    healthy = health == "OK" and state in ("Enabled", "StandbyOffline", "Quiesced")
    return healthy, "" if healthy else f"Health {health}, State {state}"
