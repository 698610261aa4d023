"""Readings: node and per-GPU/CPU power, energy, limits and temperature, and the raw documents.

Sources, by preference (redfish.md §1.5): `EnvironmentMetrics` (`PowerWatts`, `EnergyJoules`,
`TemperatureCelsius`, `PowerLimitWatts`), a `Control`'s `Sensor.Reading` and limits (or the Sensor
its `Sensor.DataSourceUri` names, where the excerpt has no Reading: HPE Cray EX), and the legacy
`Power.PowerControl[].PowerConsumedWatts` (else its `PowerMetrics.AverageConsumedWatts`: AMI). One
GET per resource, all of a request's GETs concurrent under the BMC's limit; a failed GET fails only
the readings it carries: the component whose resource answered 404 is named absent, one that timed out
or answered something that is not a Redfish document is named unknown, each with the BMC's answer, and
the request answers with everything else (`failure_notes`, `answered`). Only URIs discovery took from
the BMC's own links are read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from plugins.base import ComponentMetrics, DeviceControllerError, NodeMetrics
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._discovery.layout import MECH_CONTROL, MECH_LEGACY, SENSOR, Component, Discovery
from plugins.redfish._platforms import LimitReading, mechanism_for
from plugins.redfish._platforms._base import limit_watts, number, set_point_in_force
from plugins.redfish._platforms.legacy_power import consumed_watts
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import ResourceNotFoundError

#: how a resource that could not be read leaves its readings: gone (404), or not known (any other failure)
ABSENT, UNKNOWN = "absent", "unknown"


@dataclass
class Readings:
    """Documents read for one metrics request, and what could not be read."""

    documents: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    #: URI -> (ABSENT or UNKNOWN, the BMC's answer) for every resource that could not be read
    failed: dict[str, tuple[str, str]] = field(default_factory=dict)

    def answered(self, uris: Sequence[str]) -> bool:
        """Whether the request has something to answer with: no URI to read, or at least one read."""
        return not uris or any(u in self.documents for u in uris)

    #: the documents with their ETags, for parsing limit readings
    fetched: dict[str, Document] = field(default_factory=dict)


def sources(
    discovery: Discovery, components: Sequence[Component], *, node: bool, limits: bool = False
) -> list[str]:
    """URIs to read for these components (and the node reading); with `limits`, every resource
    that carries one of their caps too (a node cap's Control or Power resource, a module's)."""
    uris: list[str] = []
    if node and discovery.node_metrics[1]:
        uris.append(discovery.node_metrics[1])
    for comp in components:
        uris += [u for _, u in component_sources(comp, limits=limits)]
    return list(dict.fromkeys(uris))


def component_sources(comp: Component, *, limits: bool) -> list[tuple[str, str]]:
    """(what, URI) of each resource one component's readings come from: its metrics (`""`) and,
    where read, its limit (`"limit"`: a Control's always, any cap's with `limits`)."""
    out = [("", comp.metrics_uri)] if comp.metrics_uri else []
    if comp.limit_uri and (comp.mechanism == MECH_CONTROL or (limits and mechanism_for(comp))):
        out.append(("limit", comp.limit_uri))
    return out


def limit_readings(components: Sequence[Component], readings: Readings) -> dict[str, LimitReading]:
    """Each component's cap as the documents read show it, by state key (`node`, `module/0`,
    `cpu/1`, `gpu/0`); a component whose cap resource was not read, or does not parse, is left out."""
    out: dict[str, LimitReading] = {}
    for comp in components:
        mech = mechanism_for(comp)
        doc = readings.fetched.get(comp.limit_uri) if comp.limit_uri else None
        if mech is None or doc is None:
            continue
        try:
            out[comp.key] = mech.read(comp, doc)  # with its evidence: a later write may stand on it
        except DeviceControllerError:
            continue  # a resource that is not a cap this time: the last reading stays
    return out


async def read(bmc: OpBmc, uris: Sequence[str]) -> Readings:
    """GET every URI (concurrently, paced by the BMC's limit); failures are collected, not raised."""
    out = Readings()

    async def one(uri: str) -> None:
        try:
            doc = await bmc.get(uri)
        except DeviceControllerError as exc:
            out.errors.append(str(exc))
            out.failed[uri] = (ABSENT if isinstance(exc, ResourceNotFoundError) else UNKNOWN, str(exc))
            return
        body = doc.body
        if not isinstance(body, Mapping):
            why = f"{uri}: the BMC answered a {type(body).__name__}, not a Redfish resource"
            out.errors.append(why)
            out.failed[uri] = (UNKNOWN, why)
            return
        out.documents[uri] = body
        out.fetched[uri] = doc

    await asyncio.gather(*(one(u) for u in uris))
    return out


def component_metrics(
    comp: Component, docs: Mapping[str, Mapping[str, Any]], absent: list[str] | None = None
) -> ComponentMetrics:
    """A GPU's or CPU's metrics from its EnvironmentMetrics and/or Control.

    A reading the BMC does not report (no resource, or a resource read without the property) is
    named in `absent` ("GPU 1 power"); its field stays 0 only because the wire type has no null.
    """
    em = docs.get(comp.metrics_uri, {}) if comp.metrics_uri else {}
    control = docs.get(comp.limit_uri, {}) if comp.mechanism == MECH_CONTROL else {}
    limit = em.get("PowerLimitWatts") if isinstance(em.get("PowerLimitWatts"), Mapping) else {}
    power = _reading(em, "PowerWatts")
    if power is None and control:
        sensor = control.get("Sensor")
        power = number(sensor.get("Reading")) if isinstance(sensor, Mapping) else None
    # NOTE: a disabled control or a no-limit sentinel (4294967 W on NVIDIA HGX) is no limit, never watts
    set_point = set_point_in_force(limit or control)
    source = limit or control
    energy = _reading(em, "EnergyJoules")
    read = was_read(comp, docs)
    if absent is not None and read:
        if power is None:
            absent.append(f"{comp.label} power")
        if em and energy is None:
            absent.append(f"{comp.label} energy")
    return ComponentMetrics(
        id=str(comp.index),
        power_watts=power or 0.0,
        energy_joules=energy or 0.0,
        limit_watts=set_point or 0.0,
        min_watts=number(source.get("AllowableMin")) or 0.0,
        max_watts=limit_watts(source.get("AllowableMax")) or 0.0,
        temperature_celsius=_reading(em, "TemperatureCelsius") or 0.0,
    )


def was_read(comp: Component, docs: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether every resource the component's readings come from was read (else a read error says why)."""
    uris = [u for u in (comp.metrics_uri, comp.limit_uri if comp.mechanism == MECH_CONTROL else "") if u]
    return all(u in docs for u in uris)


def failure_notes(
    discovery: Discovery,
    components: Sequence[Component],
    readings: Readings,
    *,
    node: bool,
    limits: bool = False,
) -> list[str]:
    """One line per component read (and the node's power) whose resource could not be read, naming
    the component (a module's or the node's limit too, as `sources` read them with `limits`) absent
    (404) or unknown (timeout, malformed, refused) with the BMC's answer."""
    notes: list[str] = []
    named: set[str] = set()
    uri = discovery.node_metrics[1]
    if node and uri in readings.failed:
        state, why = readings.failed[uri]
        notes.append(f"node power {state}: {why}")
        named.add(uri)
    for comp in components:
        said: set[str] = set()  # a GPU's EnvironmentMetrics is often its limit too: one line
        for what, u in component_sources(comp, limits=limits):
            if u in readings.failed and u not in said:
                state, why = readings.failed[u]
                notes.append(f"{f'{comp.label} {what}'.strip()} {state}: {why}")
                said.add(u)
        named |= said
    notes += [f"{state}: {why}" for u, (state, why) in readings.failed.items() if u not in named]
    return notes


def absent_message(absent: Sequence[str]) -> str:
    """How a response names readings the BMC does not report."""
    return f"not reported by the BMC (absent, not 0): {', '.join(absent)}" if absent else ""


def node_power(discovery: Discovery, docs: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The node's power reading, if its source was read."""
    kind, uri = discovery.node_metrics
    doc = docs.get(uri)
    if not doc:
        return None
    if kind == MECH_LEGACY:
        member = discovery.node[0].member if discovery.node else 0
        controls = doc.get("PowerControl") or []
        if member < len(controls) and isinstance(controls[member], Mapping):
            return consumed_watts(controls[member])
        return None
    if kind == MECH_CONTROL:
        sensor = doc.get("Sensor")
        return number(sensor.get("Reading")) if isinstance(sensor, Mapping) else None
    if kind == SENSOR:
        return number(doc.get("Reading"))
    return _reading(doc, "PowerWatts")


def node_metrics(
    name: str, discovery: Discovery, readings: Readings, memory_units: int, absent: list[str]
) -> NodeMetrics:
    """The `NodeMetrics` of one std-metrics request; readings the BMC lacks are added to `absent`."""
    docs = readings.documents
    power = node_power(discovery, docs)
    uri = discovery.node_metrics[1]
    if power is None and (not uri or uri in docs):
        why = " (the BMC links no node power resource)"
        if len(discovery.systems) > 1 and not discovery.system:
            # NOTE: one BMC for several nodes: which node's power is meant needs the `system` option
            why = f" (this BMC serves several systems, {', '.join(discovery.systems)}: option `system`)"
        absent.append("node power" + ("" if uri else why))
    return NodeMetrics(
        name=name,
        power_watts=power or 0.0,
        gpus=tuple(component_metrics(c, docs, absent) for c in discovery.gpus),
        cpus=tuple(component_metrics(c, docs, absent) for c in discovery.cpus),
        memory_units=memory_units,
        sampled_at=datetime.now(UTC),
    )


def _reading(doc: Mapping[str, Any], name: str) -> float | None:
    value = doc.get(name)
    return number(value.get("Reading")) if isinstance(value, Mapping) else None
