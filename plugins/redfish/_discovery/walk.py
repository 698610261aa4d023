"""Discovery's reads: each resource at most once, a link the BMC cannot serve recorded as absent.

Real firmware links resources it cannot serve: an Intel S2600BP lists `Chassis/RackMount` and answers
404 for it, HPE Cray EX node controllers link `Chassis/Mezz*/Power` that answer
`ResourceMissingAtURI`. Such a link is an absent resource, kept with its reason in the discovery's
evidence, never a failed node; only the service root and the collections discovery starts from must
be readable.

A BMC's listings are its word, and bound nothing we read: discovery takes at most `MAX_MEMBERS` from
one collection and makes at most `MAX_READS` GETs. A BMC past either is refused whole, with the
reason, never walked in part: a part would be evidence with holes (a Control not read may be the
one that shows a limit's scope).
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plugins.base.schema import clip
from plugins.redfish._client.client import BmcClient, Document
from plugins.redfish._client.uris import redfish_path
from plugins.redfish._discovery.layout import ROOT, Component, link_of, members_of
from plugins.redfish._platforms._base import number
from plugins.redfish._wire.errors import (
    PlatformUnsupportedError,
    ProtocolError,
    RedfishHTTPError,
    ResourceNotFoundError,
)

#: the most members discovery takes from one collection, and the most GETs one discovery makes:
#: about ten times the largest real BMC in the corpus (a captured GB300 NVL compute tray lists 42
#: chassis, and its discovery reads 131 resources)
MAX_MEMBERS = 512
MAX_READS = 1536


@functools.lru_cache(maxsize=16)
def _allow_list(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One expression matching any of `patterns` (`*` = within one path segment), compiled once per
    allow-list: discovery checks every path it reads (one match each, not one per pattern)."""
    return re.compile("|".join("[^/]*".join(re.escape(part) for part in p.split("*")) for p in patterns))


def _missing(exc: RedfishHTTPError) -> bool:
    """404, or another status whose message says the resource is missing (some firmware: 400/500)."""
    return isinstance(exc, ResourceNotFoundError) or exc.has_message("ResourceMissingAtURI")


@dataclass(frozen=True, slots=True)
class LimitRead:
    """Discovery's GET of a limit resource: `ticket` is the client's read-back ticket taken before
    it (`ReadBacks.ticket`); while the client's ticket for the path is still the same, nothing was
    written to it, and nothing failed, since that GET was sent."""

    doc: Document
    ticket: tuple[int, int]


class Walker:
    """GETs for discovery, each resource at most once, two at a time (the BMC limit applies anyway).

    Attributes:
        evidence: one line per resource considered (absent, chosen, skipped) and why.
    """

    def __init__(self, client: BmcClient, deadline: float, allowed: tuple[str, ...] | None = None) -> None:
        self.client = client
        self.deadline = deadline
        self._seen: dict[str, Document] = {}
        #: path -> the client's read-back ticket taken before its GET (`limit_reads`)
        self._tickets: dict[str, tuple[int, int]] = {}
        self._absent: set[str] = set()
        self._reads = 0
        self._allowed = _allow_list(tuple(allowed)) if allowed is not None else None
        self.evidence: list[str] = []

    def allowed(self, path: str) -> bool:
        """Whether discovery may read this path on this platform."""
        return self._allowed is None or self._allowed.fullmatch(path.rstrip("/") or "/") is not None

    async def get(self, path: str) -> Document:
        """A resource that must be readable (errors propagate)."""
        doc = self._seen.get(path)
        if doc is None:
            if not self.allowed(path):
                # a BMC whose links lead elsewhere: refuse rather than walk past the platform's paths
                raise PlatformUnsupportedError(
                    f"{self.client.origin}: discovery would read {path.rstrip('/') or '/'}, which is not "
                    "among the paths this platform needs (docs/redfish.md, Discovery)"
                )
            if self._reads >= MAX_READS:
                raise ProtocolError(
                    f"{self.client.origin}: discovery would read more than {MAX_READS} resources of this "
                    "BMC; refused rather than walked in part (docs/redfish.md, Discovery)"
                )
            self._reads += 1
            ticket = self.client.read_backs.ticket(path)
            doc = await self.client.get(path, deadline=self.deadline)
            self._seen[path] = doc
            self._tickets[path] = ticket
        return doc

    def limit_reads(self, components: Sequence[Component]) -> dict[str, LimitRead]:
        """The GETs discovery made of the components' limit resources, for the same operation's
        first cap change to write from (`LimitRead`)."""
        out: dict[str, LimitRead] = {}
        for comp in components:
            doc = self._seen.get(comp.limit_uri) if comp.mechanism else None
            ticket = self._tickets.get(comp.limit_uri)
            if doc is not None and ticket is not None:
                out[comp.limit_uri] = LimitRead(doc, ticket)
        return out

    async def find(self, path: str) -> Document | None:
        """A linked resource; None (recorded as absent, with the BMC's answer) when it cannot be served,
        and never requested where the link leaves the Redfish tree as sent (a dot segment, an
        escape: `redfish_path`)."""
        if path in self._absent:
            return None
        if path.rstrip("/") != ROOT and not redfish_path(path):
            self._absent.add(path)
            self.evidence.append(f"{clip(path)}: skipped: a link out of the Redfish tree, not followed")
            return None
        try:
            return await self.get(path)
        except RedfishHTTPError as exc:
            if not _missing(exc):
                raise
            self._absent.add(path)
            ids = [i.rsplit(".", 1)[-1] for i in exc.message_ids]
            code = "ResourceMissingAtURI" if "ResourceMissingAtURI" in ids else (ids[0] if ids else "")
            self.evidence.append(
                f"{path.rstrip('/')}: absent (the BMC answered {exc.status} {code})".replace(" )", ")")
            )
            return None

    async def find_many(self, paths: Sequence[str]) -> list[Document]:
        """The resources that can be served, in the order given."""
        found = await asyncio.gather(*(self.find(p) for p in paths))
        return [d for d in found if d is not None]

    async def members(self, collection_path: str) -> list[str]:
        """Member URIs of a collection ([] when the collection itself is absent); a listing longer
        than `MAX_MEMBERS` refuses the discovery."""
        doc = await self.find(collection_path)
        found = members_of(doc) if doc is not None else []
        if len(found) > MAX_MEMBERS:
            raise ProtocolError(
                f"{self.client.origin}: {clip(collection_path.rstrip('/'))} lists {len(found)} members, more "
                f"than the {MAX_MEMBERS} discovery reads of one collection; refused rather than walked in "
                "part (docs/redfish.md, Discovery)"
            )
        return found

    async def linked(self, body: Mapping[str, object], name: str) -> Document | None:
        """The resource a navigation property points to, if any and servable."""
        path = link_of(body, name)  # type: ignore[arg-type]
        return await self.find(path) if path else None


# ---- the walk ------------------------------------------------------------------------------------


async def firmware_of(walker: Walker, root: Document) -> str:
    """The BMC manager's firmware version."""
    managers = link_of(root.body, "Managers")
    ids = await walker.members(managers) if managers else []
    if not ids:
        return ""
    # NOTE: the BMC's own manager is `BMC` on NVIDIA bmcweb (dps.md §7), often `1` elsewhere
    ids.sort(key=lambda m: (not m.rstrip("/").endswith("/BMC"), m))
    manager = await walker.find(ids[0])
    return str(manager.get("FirmwareVersion") or "") if manager is not None else ""


async def systems_of(walker: Walker, root: Document, *, nvidia: bool) -> list[Document]:
    """Every ComputerSystem the BMC can serve; on NVIDIA only `HGX_Baseboard_*`."""
    systems_path = link_of(root.body, "Systems")
    if not systems_path:
        return []
    paths = await walker.members(systems_path)
    if nvidia:
        # NOTE: NVIDIA HGX puts GPUs and Grace CPUs under Systems/HGX_Baseboard_0 (redfish.md §2.1),
        # and the DPS proxy allows no other system (dps.md §7): the host's System_0 is never read
        paths = [p for p in paths if p.rstrip("/").rsplit("/", 1)[-1].startswith("HGX_Baseboard")]
        return await walker.find_many(paths)
    return await walker.find_many(paths)


async def processors_of(walker: Walker, systems: list[Document]) -> list[Document]:
    """The processors of the given systems only (never a SmartNIC's or another node's)."""
    out: list[Document] = []
    for system in systems:
        procs_path = link_of(system.body, "Processors")
        if procs_path:
            out += await walker.find_many(await walker.members(procs_path))
    return out


async def chassis_of(walker: Walker, root: Document, *, fetch: bool) -> list[Document]:
    """Chassis documents; with `fetch=False` only the collection is read and ids are used.

    NOTE: the DPS allow-list for NVIDIA BMCs permits GET on `Chassis/HGX_ProcessorModule_*`'s
    EnvironmentMetrics but not on the chassis resource itself (dps.md §7), so on NVIDIA
    platforms the walk stops at the collection; the NVIDIA platform reads each member itself,
    allowing for the proxy's refusal (`_platforms.nvidia_hgx.nvidia_limits`).
    """
    chassis_path = link_of(root.body, "Chassis")
    if not chassis_path:
        return []
    members = await walker.members(chassis_path)
    if fetch:
        return await walker.find_many(members)
    return [Document(m, {"@odata.id": m, "Id": m.rstrip("/").rsplit("/", 1)[-1]}) for m in members]


async def controls_of(walker: Walker, chassis: list[Document]) -> list[tuple[Document, Document]]:
    """(chassis, control) pairs for every Control of the given chassis."""
    found: list[tuple[Document, Document]] = []
    for ch in chassis:
        path = link_of(ch.body, "Controls")
        if path:
            found += [(ch, c) for c in await walker.find_many(await walker.members(path))]
    return found


async def walker_em_caps(
    walker: Walker, chassis: list[Document], gpus: list[Component], cpus: list[Component]
) -> dict[str, Document] | None:
    """EnvironmentMetrics documents that carry `PowerLimitWatts`, keyed by URI; None if none."""
    paths = [c.metrics_uri for c in gpus + cpus if c.metrics_uri]
    paths += [p for ch in chassis if (p := link_of(ch.body, "EnvironmentMetrics"))]
    if not paths:
        return None
    docs = await walker.find_many(paths)
    caps = {d.path: d for d in docs if isinstance(d.get("PowerLimitWatts"), Mapping)}
    return caps or None


async def legacy_power_of(walker: Walker, chassis: list[Document]) -> tuple[Document, Document] | None:
    """The first chassis `Power` with a `PowerControl[].PowerLimit` (capable or not)."""
    for ch in chassis:
        power = await walker.linked(ch.body, "Power")
        controls = (power.get("PowerControl") or []) if power is not None else []
        if power is not None and any(
            isinstance(c, Mapping) and isinstance(c.get("PowerLimit"), Mapping) for c in controls
        ):
            return ch, power
    return None


async def has_node_manager(walker: Walker, root: Document) -> bool:
    """Whether a manager shows an OEM `NodeManager` (NVIDIA/AMI)."""
    managers = link_of(root.body, "Managers")
    if not managers:
        return False
    for path in await walker.members(managers):
        manager = await walker.find(path)
        oem = (manager.get("Oem") or {}) if manager is not None else {}
        if isinstance(oem, Mapping) and any(
            isinstance(v, Mapping) and "NodeManager" in v for v in oem.values()
        ):
            return True
    return False


async def sensor_behind(walker: Walker, control_uri: str) -> str:
    """The `Sensor` a power Control's excerpt names (`Sensor.DataSourceUri`) when the excerpt itself
    has no `Reading` (HPE Cray EX firmware), if that Sensor reads watts; '' otherwise. The Control was
    read by discovery already."""
    control = await walker.find(control_uri)
    sensor = control.get("Sensor") if control is not None else None
    if not isinstance(sensor, Mapping) or number(sensor.get("Reading")) is not None:
        return ""
    source = sensor.get("DataSourceUri")
    # NOTE: a URI the BMC gave is read only on its own service, as a plain path
    if not isinstance(source, str) or not source.startswith("/redfish/v1/") or ".." in source:
        return ""
    doc = await walker.find(source)
    units = doc.get("ReadingUnits") if doc is not None else None
    if doc is None or number(doc.get("Reading")) is None or units not in (None, "W", "Watts"):
        return ""
    walker.evidence.append(
        f"node power: {source.rstrip('/')} (named by {control_uri}'s Sensor.DataSourceUri; the Control "
        "shows no Reading)"
    )
    return source.rstrip("/")
