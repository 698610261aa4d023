"""HPE Apollo 6500 (ProLiant XL675d): the node limit through the OEM `AccPowerService`.

These iLO 5 systems show no standard limit (their `PowerControl` has no `PowerLimit`). HPE's own power
service caps them through `Chassis/1/Power/AccPowerService/PowerLimit`, linked from
`Power.Oem.Hpe.Links.AccPowerService`, and calls it the node power limit: read
`PowerLimits[zone].PowerLimitInWatts` with `PowerLimitRanges[zone]` as bounds (0 means not
reported), set with `POST …/Actions/HpeServerAccPowerLimit.ConfigurePowerLimit`
`{"PowerLimits": [{"PowerLimitInWatts": N, "ZoneNumber": 0}]}` (Cray-HPE/hms-power-control
`internal/domain/power-cap.go`: `generatePowerCapPayload`, `parsePowerCapRFData`). There is no "no
cap" state: restore puts the value read before the first change back.

Zone 0 is the whole chassis ("0 for entire chassis", HPE iLO 5 resource definitions,
`HpeServerAccPowerLimit.v1_0_0`). On an Apollo 2000 (or an XL645d pair) that chassis holds several
nodes, each with its own iLO, and `AccPowerService/NodesInfo` lists them (`NodeInfoList[].NodeNumber`,
`HpeServerAccPowerNodesInfo.v1_0_0`): the zone is then a budget shared by those nodes, never one
node's cap, and is only listed (a group budget). A BMC that does not serve `NodesInfo` (the
captured XL675d, one node per chassis) keeps the zone as the node cap, with that said in the evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from plugins.redfish._discovery.layout import (
    AUTO,
    LEGACY_POWER,
    MECH_HPE_ACC,
    Component,
    Discovery,
    generic_node_metrics,
)
from plugins.redfish._discovery.walk import Walker
from plugins.redfish._platforms._base import CapRequest, LimitReading, Mechanism, Prior, limit_watts, number
from plugins.redfish._platforms.platform import Platform, Probe
from plugins.redfish._wire.document import Document

ACTION = "#HpeServerAccPowerLimit.ConfigurePowerLimit"
ZONE = 0


def acc_action_target(body: Mapping[str, Any]) -> str:
    """The ConfigurePowerLimit action's target ('' when the resource shows none)."""
    actions = body.get("Actions")
    entry = actions.get(ACTION) if isinstance(actions, Mapping) else None
    target = entry.get("target") if isinstance(entry, Mapping) else None
    return str(target).rstrip("/") if isinstance(target, str) else ""


def _zone(items: Any) -> Mapping[str, Any]:
    for item in items if isinstance(items, list) else ():
        if isinstance(item, Mapping) and item.get("ZoneNumber") == ZONE:
            return item
    return {}


class HpeAccPowerLimitMechanism(Mechanism):
    """The zone-0 limit of HPE's `HpeServerAccPowerLimit` resource."""

    name = MECH_HPE_ACC
    # NOTE: the action takes no If-Match; the read-back is the proof
    etag_policy = "none"
    actions = {ACTION: frozenset({"PowerLimits"})}

    def parse(self, component: Component, doc: Document) -> LimitReading:
        # NOTE: null when the limit is disabled (HpeServerAccPowerLimit.v1_0_0): no cap
        watts = limit_watts(_zone(doc.get("PowerLimits")).get("PowerLimitInWatts"))
        ranges = _zone(doc.get("PowerLimitRanges"))
        actual = number(_zone(doc.get("ActualPowerLimits")).get("PowerLimitInWatts"))
        return LimitReading(
            watts=watts,
            capped=watts is not None,
            min_watts=number(ranges.get("MinimumPowerLimit")) or None,
            max_watts=number(ranges.get("MaximumPowerLimit")) or None,
            min_name="PowerLimitRanges/MinimumPowerLimit",
            max_name="PowerLimitRanges/MaximumPowerLimit",
            power_watts=actual,
            etag=doc.etag,
        )

    def offers(self, component: Component, doc: Document) -> str:
        if acc_action_target(doc.body):
            return ""
        return f"{doc.path.rstrip('/')} lists no {ACTION.lstrip('#')} action"

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        body = {"PowerLimits": [{"PowerLimitInWatts": int(watts), "ZoneNumber": ZONE}]}
        return CapRequest("POST", component.name, body, if_match=False)

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        # no "no cap" state: the published maximum, else the value in force (a no-op)
        target = current.max_watts or current.watts or 0
        return self.set_request(component, round(target), current)

    def restore_request(
        self, component: Component, prior: Prior, current: LimitReading, doc: Document
    ) -> CapRequest:
        if prior.watts is None:
            return self.clear_request(component, current, doc)
        return self.set_request(component, round(prior.watts), current)


def zone_nodes(nodes_info: Document | None) -> list[str]:
    """The node numbers `NodesInfo.NodeInfoList` lists (each once, in order)."""
    items = nodes_info.get("NodeInfoList") if nodes_info is not None else None
    out: list[str] = []
    for item in items if isinstance(items, list) else ():
        number_ = item.get("NodeNumber") if isinstance(item, Mapping) else None
        if number_ is not None and not isinstance(number_, bool) and str(number_) not in out:
            out.append(str(number_))
    return out


def discover_hpe_acc(
    base: Discovery,
    chassis: list[Document],
    found: tuple[Document, Document, Document | None],
    gpus: list[Component],
    cpus: list[Component],
) -> Discovery:
    """The node cap through the AccPowerService action, or the zone listed as a budget of several
    nodes (see the module docstring)."""
    ch, limit, nodes_info = found
    nodes = zone_nodes(nodes_info)
    uri = limit.path.rstrip("/")
    if len(nodes) > 1:
        covers = "nodes " + ", ".join(nodes)
        why = (
            f"HPE AccPowerService PowerLimit zone {ZONE} is the chassis power budget shared by {covers} "
            "(AccPowerService NodesInfo): a budget that covers other nodes is never written as this "
            "node's cap"
        )
        group = Component(
            key="group/0",
            kind="group",
            index=0,
            name=f"AccPowerService zone {ZONE}",
            mechanism=MECH_HPE_ACC,
            limit_uri=uri,
            resource_uri=ch.path,
            reason=why,
            covers=covers,
        )
        return replace(
            base,
            platform=LEGACY_POWER,
            node=(),
            gpus=tuple(gpus),
            cpus=tuple(cpus),
            groups=(group,),
            node_metrics=generic_node_metrics(chassis, ()),
            note=why,
            evidence=(*base.evidence, f"{uri}: group budget: {why}"),
        )
    shown = (
        f"NodesInfo lists node {nodes[0]} only"
        if nodes
        else "the BMC serves no NodesInfo: the zone is taken as this node's"
    )
    reason = (
        "the node cap (HPE AccPowerService PowerLimit zone 0, set with HpeServerAccPowerLimit."
        "ConfigurePowerLimit as HPE's power service does)"
    )
    node = Component(
        key="node",
        kind="node",
        index=0,
        # NOTE: the action's target; `limit_uri` is the resource read before and after
        name=acc_action_target(limit.body),
        mechanism=MECH_HPE_ACC,
        limit_uri=limit.path.rstrip("/"),
        resource_uri=ch.path,
        reason=reason,
    )
    return replace(
        base,
        platform=LEGACY_POWER,
        node=(node,),
        gpus=tuple(gpus),
        cpus=tuple(cpus),
        node_metrics=generic_node_metrics(chassis, ()),
        note="the node limit is HPE's AccPowerService (OEM); GPUs and CPUs have no limit of their own",
        evidence=(*base.evidence, f"{node.limit_uri}: chosen: {reason}; {shown}"),
    )


async def hpe_acc_limit_of(
    walker: Walker, chassis: list[Document]
) -> tuple[Document, Document, Document | None] | None:
    """HPE Apollo's `Power/AccPowerService/PowerLimit` (linked from `Power.Oem.Hpe.Links`), with the
    service's `NodesInfo` (the nodes its zones cover; None when the BMC does not serve it)."""
    for ch in chassis:
        power = await walker.linked(ch.body, "Power")
        oem = power.get("Oem") if power is not None else None
        hpe = oem.get("Hpe") if isinstance(oem, Mapping) else None
        links = hpe.get("Links") if isinstance(hpe, Mapping) else None
        service = await walker.linked(links, "AccPowerService") if isinstance(links, Mapping) else None
        service_links = service.get("Links") if service is not None else None
        if isinstance(service_links, Mapping):
            limit = await walker.linked(service_links, "PowerLimit")
            if limit is not None and acc_action_target(limit.body):
                return ch, limit, await walker.linked(service_links, "NodesInfo")
    return None


async def probe(p: Probe) -> Discovery | None:
    """The zone-0 limit where a chassis Power links HPE's AccPowerService and its PowerLimit lists the
    ConfigurePowerLimit action (probed only)."""
    found = await hpe_acc_limit_of(p.walker, p.chassis) if p.hint == AUTO else None
    if found is None:
        return None
    zone = discover_hpe_acc(p.base, p.chassis, found, p.gpus, p.cpus)
    n = len(p.classified.groups)
    shared = [replace(g, key=f"group/{n + i}", index=n + i) for i, g in enumerate(zone.groups)]
    return replace(zone, groups=(*p.classified.groups, *shared))


PLATFORM = Platform(
    name="hpe-apollo-acc",
    matches=(
        "Chassis Power.Oem.Hpe.Links.AccPowerService -> PowerLimit listing "
        "#HpeServerAccPowerLimit.ConfigurePowerLimit"
    ),
    writes='POST <action> {"PowerLimits": [{"PowerLimitInWatts": N, "ZoneNumber": 0}]}',
    restores="the zone's value before the first change (there is no 'no cap' state)",
    probe=probe,
    quirks=("a zone NodesInfo says covers several nodes is a group budget, never a node cap",),
    refuses=(
        "GPU and CPU caps: the node limit is HPE's AccPowerService (OEM)",
        "a node cap when AccPowerService/NodesInfo lists several nodes in the zone (a shared budget)",
    ),
)
