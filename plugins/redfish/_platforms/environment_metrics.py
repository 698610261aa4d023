"""`EnvironmentMetrics.PowerLimitWatts`: NVIDIA GB200/GB300/B200EM/B300EM per-component caps.

Set: `PATCH …/EnvironmentMetrics {"PowerLimitWatts": {"SetPoint": <int>}}` on
`Systems/HGX_Baseboard_0/Processors/{GPU_n|CPU_n}` and `Chassis/HGX_ProcessorModule_n`.
Clear: the `ClearOOBSetPoint` OEM action where advertised, else `SetPoint = DefaultSetPoint`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from plugins.redfish._discovery.layout import (
    AUTO,
    ENVIRONMENT_METRICS,
    MECH_EM,
    PART_TYPES,
    Component,
    Discovery,
    generic_node_metrics,
    id_of,
    link_of,
    natural_key,
)
from plugins.redfish._discovery.walk import walker_em_caps
from plugins.redfish._platforms._base import (
    PERSISTENCY_ABSENT,
    PERSISTENCY_OFF,
    PERSISTENCY_ON,
    CapRequest,
    LimitReading,
    Mechanism,
    limit_watts,
    number,
    set_point_in_force,
)
from plugins.redfish._platforms.nvidia_hgx import NONVOLATILE_CPU_LIMIT, module_scope, processor_places
from plugins.redfish._platforms.platform import Platform, Probe
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import PlatformUnsupportedError

CLEAR_OOB = "NvidiaEnvironmentMetrics.ClearOOBSetPoint"


class EnvironmentMetricsMechanism(Mechanism):
    """Caps in `EnvironmentMetrics.PowerLimitWatts` (a `ControlSingleExcerpt`)."""

    name = MECH_EM
    # NOTE: EnvironmentMetrics carries live readings (PowerWatts, EnergyJoules); on bmcweb the ETag
    # is a hash of the whole body, so If-Match fails whenever a reading moved (real-firmware.md).
    etag_policy = "body-hash"
    writes = ("PowerLimitWatts", "Oem")
    actions = {f"#{CLEAR_OOB}": frozenset()}

    def parse(self, component: Component, doc: Document) -> LimitReading:
        limit = doc.get("PowerLimitWatts")
        if limit.__class__ is not dict and not isinstance(limit, Mapping):  # a dict told first
            limit = {}
        set_point = set_point_in_force(limit)
        default = limit_watts(limit.get("DefaultSetPoint"))
        mode = limit.get("ControlMode")
        return LimitReading(
            watts=set_point,
            capped=_oob_active(doc.body, set_point, default, mode),
            min_watts=number(limit.get("AllowableMin")),
            max_watts=limit_watts(limit.get("AllowableMax")),
            default_watts=default,
            mode=str(mode) if mode is not None else None,
            power_watts=number(limit.get("Reading")) or _reading(doc.body, "PowerWatts"),
            etag=doc.etag,
            persistency=_persistency(doc.body),
        )

    def offers(self, component: Component, doc: Document) -> str:
        limit = doc.get("PowerLimitWatts")
        if limit.__class__ is dict or isinstance(limit, Mapping):
            return ""
        return f"{doc.path.rstrip('/')} carries no PowerLimitWatts: the BMC offers no limit there"

    def set_request(self, component: Component, watts: int, current: LimitReading) -> CapRequest:
        # NOTE: NVIDIA bmcweb parses only SetPoint inside PowerLimitWatts (a ControlMode there is
        # rejected as unknown), and only integers (redfish.md §2.2, NVIDIA/bmcweb environment_util.hpp).
        return CapRequest("PATCH", component.limit_uri, {"PowerLimitWatts": {"SetPoint": int(watts)}})

    def persist(self, request: CapRequest, doc: Document, persistent: bool = True) -> CapRequest:
        # NOTE: NVIDIA bmcweb takes Oem.Nvidia.PowerLimitPersistency next to the SetPoint (default
        # false: the cap does not survive a BMC or host reset). Sent only where the resource shows
        # that property (the write gate writes nothing the GET did not show); a restore sends the
        # prior's own value (false included).
        limit = request.body.get("PowerLimitWatts")
        if request.method != "PATCH" or not isinstance(limit, Mapping) or "SetPoint" not in limit:
            return request
        oem = doc.body.get("Oem")
        nvidia = oem.get("Nvidia") if isinstance(oem, Mapping) else None
        if not (isinstance(nvidia, Mapping) and "PowerLimitPersistency" in nvidia):
            return request
        body = {**request.body, "Oem": {"Nvidia": {"PowerLimitPersistency": persistent}}}
        return replace(request, body=body)

    def persistence(self, component: Component, request: CapRequest, doc: Document, persistent: bool) -> str:
        # NOTE: a Grace CPU limit that names its Control is the CPU's non-volatile one (NVIDIA's
        # bmcweb shows no other there, and writes every power Control of the CPU with it): the cap
        # survives resets whatever was asked (`nvidia_hgx.NONVOLATILE_CPU_LIMIT`)
        if component.quirk != NONVOLATILE_CPU_LIMIT:
            return super().persistence(component, request, doc, persistent)
        if persistent:
            return ""  # asked to persist, and it does
        return (
            f"{component.label}: this cap survives BMC and host resets although persistent_caps is not "
            f"set: the limit {component.limit_uri} shows is the CPU's non-volatile one, and NVIDIA's "
            "firmware writes every power Control of the CPU with it"
        )

    def clear_request(self, component: Component, current: LimitReading, doc: Document) -> CapRequest:
        target = _clear_target(doc.body)
        if target:
            # NOTE: NVIDIA clears an out-of-band set point with an OEM action, not with a PATCH
            # (redfish.md §2.2, NVIDIA/bmcweb environment_metrics.hpp).
            return CapRequest("POST", target, {}, if_match=False)
        if current.default_watts is not None:
            return self.set_request(component, round(current.default_watts), current)
        if _nvidia_oem(doc.body) or _HGX_LIMIT.fullmatch(doc.path.rstrip("/")):
            # NOTE: NVIDIA bmcweb reads only SetPoint inside PowerLimitWatts (environment_util.hpp):
            # a ControlMode there is a certain 400, so it is not sent
            raise PlatformUnsupportedError(
                f"{doc.path.rstrip('/')}: no request of this BMC removes the cap: it offers no "
                f"{CLEAR_OOB} action and no DefaultSetPoint, and NVIDIA's firmware takes only a "
                "SetPoint in PowerLimitWatts; nothing written"
            )
        # NOTE: only where the limit shows a ControlMode; elsewhere the write gate refuses it (a
        # property the resource does not carry is never written)
        return CapRequest("PATCH", component.limit_uri, {"PowerLimitWatts": {"ControlMode": "Disabled"}})


#: the EnvironmentMetrics of NVIDIA's HGX processors and chassis (dps.md §7), which NVIDIA's bmcweb
#: serves with or without its OEM section (a captured GB300's Grace CPUs show none)
_HGX_LIMIT = re.compile(
    r"/redfish/v1/(Systems/HGX_Baseboard_\d+/Processors/[^/]+|Chassis/HGX_[^/]+)/EnvironmentMetrics"
)


def _nvidia_oem(body: Mapping[str, Any]) -> bool:
    """Whether the resource shows NVIDIA's OEM section (NVIDIA's bmcweb serves it)."""
    oem = body.get("Oem")
    return isinstance(oem, Mapping) and isinstance(oem.get("Nvidia"), Mapping)


def _oob_active(body: Mapping[str, Any], set_point: float | None, default: float | None, mode: Any) -> bool:
    """Whether an out-of-band cap is in force (vs the firmware default)."""
    if set_point is None:
        return False
    oem = body.get("Oem")
    oem = (oem or {}).get("Nvidia") if oem.__class__ is dict or isinstance(oem, Mapping) else None
    if oem.__class__ is dict or isinstance(oem, Mapping):
        # NOTE: NVIDIA shows the OOB request in RequestedPersistent/OneshotPowerLimitWatts, null
        # while none was submitted (NVIDIA/bmcweb NvidiaEnvironmentMetrics_v1.xml): where both are
        # shown they decide (a set point in force with no request is the BMC's own, in-band or by
        # its power mode, and a restore clears our request rather than writing it as one). Its
        # PowerMode is the power mode, not a cap: D-Bus Control.Power.Mode's MaximumPerformance
        # and OEM both read "Custom", PowerSaving "MaxQ" (chassis_utils.hpp `getPowerModeType`),
        # so it decides nothing here; where no request is shown, the rules below do.
        persistent = oem.get("RequestedPersistentPowerLimitWatts")
        oneshot = oem.get("RequestedOneshotPowerLimitWatts")
        if persistent is not None or oneshot is not None:
            return True
        if "RequestedPersistentPowerLimitWatts" in oem and "RequestedOneshotPowerLimitWatts" in oem:
            return False
    if mode in ("Manual", "Override"):
        return True
    if mode == "Disabled":
        return False
    if default is None:
        # NOTE: no default to tell a cap from (GB300 Grace CPU EnvironmentMetrics, an excerpt of a
        # TDP Control in Automatic): the set point in force is what restore must put back
        return True
    return abs(set_point - default) > 0.5


def _persistency(body: Mapping[str, Any]) -> str:
    """NVIDIA's `Oem.Nvidia.PowerLimitPersistency` as shown (absent or null: not shown)."""
    oem = body.get("Oem")
    nvidia = oem.get("Nvidia") if oem.__class__ is dict or isinstance(oem, Mapping) else None
    value = (
        nvidia.get("PowerLimitPersistency")
        if nvidia.__class__ is dict or isinstance(nvidia, Mapping)
        else None
    )
    if isinstance(value, bool):
        return PERSISTENCY_ON if value else PERSISTENCY_OFF
    return PERSISTENCY_ABSENT


def _clear_target(body: Mapping[str, Any]) -> str:
    actions = body.get("Actions")
    oem = actions.get("Oem") if isinstance(actions, Mapping) else None
    if isinstance(oem, Mapping):
        entry = oem.get(f"#{CLEAR_OOB}")
        if isinstance(entry, Mapping) and isinstance(entry.get("target"), str):
            return str(entry["target"])
    return ""


def _reading(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    return number(value.get("Reading")) if isinstance(value, Mapping) else None


# ---- discovery -----------------------------------------------------------------------------------


def discover_generic_em(
    base: Discovery,
    chassis: list[Document],
    gpus: list[Component],
    cpus: list[Component],
    caps: dict[str, Document],
    proc_chassis: frozenset[str] = frozenset(),
    *,
    processors: Sequence[Document] = (),
) -> Discovery:
    """Caps on whichever EnvironmentMetrics resources showed `PowerLimitWatts` when probed.

    The node cap is the first node chassis' (not a part: `PART_TYPES`), else the sum of the module
    chassis' (`ChassisType: Module`) only where their evidence proves it (`nvidia_hgx.module_scope`:
    each covers its whole module, and together they contain every GPU and CPU once); a chassis a
    Processor lives in (`proc_chassis`) carries that processor's limit, never the node's.
    """

    def capped(c: Component) -> Component:
        if c.metrics_uri in caps:
            return replace(
                c, mechanism=MECH_EM, limit_uri=c.metrics_uri, reason="its EnvironmentMetrics PowerLimitWatts"
            )
        return c

    evidence: list[str] = []
    node: list[Component] = []
    module_note = ""
    limited = [ch for ch in chassis if link_of(ch.body, "EnvironmentMetrics") in caps]
    for ch in limited:
        if ch.path.rstrip("/") in proc_chassis:
            evidence.append(f"{link_of(ch.body, 'EnvironmentMetrics')}: skipped: a processor's own chassis")
    limited = [ch for ch in limited if ch.path.rstrip("/") not in proc_chassis]
    whole = [ch for ch in limited if str(ch.get("ChassisType")) not in PART_TYPES]
    module_like = [ch for ch in limited if str(ch.get("ChassisType")) == "Module"]
    if whole:
        ch = whole[0]
        uri = link_of(ch.body, "EnvironmentMetrics")
        reason = f"the node cap (PowerLimitWatts of chassis {id_of(ch)}, {ch.get('ChassisType')})"
        node.append(
            Component(
                "node",
                "node",
                0,
                id_of(ch),
                MECH_EM,
                uri,
                resource_uri=ch.path,
                metrics_uri=uri,
                reason=reason,
            )
        )
    elif module_like:
        places = processor_places(processors, [*gpus, *cpus])
        ordered = sorted(module_like, key=lambda c: natural_key(id_of(c)))
        scopes = [
            module_scope(ch, caps[link_of(ch.body, "EnvironmentMetrics")], None, places) for ch in ordered
        ]
        covered = sorted(k for s in scopes for k in s.keys)
        everything = sorted(c.key for c in [*gpus, *cpus])
        if covered and covered == everything and all(s.kind == "module" for s in scopes):
            for i, (ch, scope) in enumerate(zip(ordered, scopes, strict=True)):
                uri = link_of(ch.body, "EnvironmentMetrics")
                reason = (
                    f"node cap share: module {id_of(ch)} ({scope.evidence}); the modules together contain "
                    "every GPU and CPU of the node, each once"
                )
                share = Component(f"module/{i}", "module", i, id_of(ch), MECH_EM, uri, resource_uri=ch.path)
                node.append(replace(share, reason=reason))
        else:
            module_note = (
                "the module chassis' limits are not proven to cover the node together (Links.Contains, "
                "PhysicalContext): a node cap is never split over them"
            )
            evidence += [f"{link_of(c.body, 'EnvironmentMetrics')}: skipped: {module_note}" for c in ordered]
    for ch in limited:
        if ch not in whole and ch not in module_like:
            kind = ch.get("ChassisType")
            evidence.append(f"{link_of(ch.body, 'EnvironmentMetrics')}: skipped: a part of the node ({kind})")
    evidence += [f"{c.limit_uri}: chosen: {c.reason}" for c in node]
    return replace(
        base,
        platform=ENVIRONMENT_METRICS,
        node=tuple(node),
        gpus=tuple(capped(c) for c in gpus),
        cpus=tuple(capped(c) for c in cpus),
        node_metrics=generic_node_metrics(chassis, node),
        note="" if node else module_note or "no chassis-level EnvironmentMetrics power limit on this BMC",
        evidence=(*base.evidence, *evidence),
    )


def processor_chassis(processors: list[Document]) -> frozenset[str]:
    """The chassis the processors live in (`Processor.Links.Chassis`)."""
    out = set()
    for doc in processors:
        links = doc.get("Links")
        where = link_of(links, "Chassis") if isinstance(links, Mapping) else ""
        if where:
            out.add(where)
    return frozenset(out)


async def probe(p: Probe) -> Discovery | None:
    """Whichever EnvironmentMetrics showed `PowerLimitWatts` when probed (probed only)."""
    em = await walker_em_caps(p.walker, p.chassis, p.gpus, p.cpus) if p.hint == AUTO else None
    if em is None:
        return None
    chassis_of_processors = processor_chassis(p.processors)
    return discover_generic_em(
        p.base, p.chassis, p.gpus, p.cpus, em, chassis_of_processors, processors=p.processors
    )


PLATFORM = Platform(
    name="environment-metrics",
    matches="a node chassis', processor's or module's EnvironmentMetrics showing PowerLimitWatts",
    writes='PATCH <EnvironmentMetrics> {"PowerLimitWatts": {"SetPoint": N}}',
    restores="the prior SetPoint; no cap: DefaultSetPoint, or ControlMode Disabled where the limit shows one",
    probe=probe,
    refuses=(
        "a node cap split over module chassis unless they contain every GPU and CPU once",
        "a processor's own chassis limit as the node's",
        "a component whose EnvironmentMetrics shows no PowerLimitWatts",
    ),
)
