"""The platforms, in the order discovery tries them (redfish.md §1.6), each declared by its own module
(`Platform`: the evidence it matches, how it writes and restores, its quirks). Discovery hands what
it read to `choose` and imports no platform by name.

Adding a platform: one module in this room that declares `PLATFORM` (its probe returns None unless
the BMC's own resources show what it needs), its place in `PLATFORMS`, a fixture under
tests/corpus/redfish and a corpus test (docs/hardware.md, "Adding a platform").
"""

from __future__ import annotations

from dataclasses import replace

from plugins.redfish._discovery.layout import (
    ENVIRONMENT_METRICS,
    LEGACY_POWER,
    NODE_MANAGER,
    Discovery,
    readings_only,
)
from plugins.redfish._discovery.walk import controls_of
from plugins.redfish._platforms import (
    controls,
    environment_metrics,
    hpe_acc,
    legacy_power,
    node_manager,
    nvidia_hgx,
    nvidia_no_limit,
)
from plugins.redfish._platforms.classify import classify_controls
from plugins.redfish._platforms.platform import Platform, Probe, matched

#: in probing order: the first whose probe matches what the BMC shows decides
PLATFORMS: tuple[Platform, ...] = (
    nvidia_hgx.PLATFORM,
    controls.PLATFORM,
    environment_metrics.PLATFORM,
    legacy_power.PLATFORM,
    hpe_acc.PLATFORM,
    legacy_power.DISABLED,
    node_manager.PLATFORM,
    nvidia_no_limit.PLATFORM,
)

NO_LIMIT = (
    "the BMC offers no power-limit resource (no Power Control, EnvironmentMetrics PowerLimitWatts or "
    "Chassis Power PowerLimit)"
)


async def choose(p: Probe) -> Discovery:
    """The first platform whose evidence the BMC shows; readings only when none does."""
    if p.hint not in (ENVIRONMENT_METRICS, NODE_MANAGER):
        found = await controls_of(p.walker, p.chassis)
        p.classified = classify_controls(p.chassis, found, p.processors, p.gpus, p.cpus, p.walker.evidence)
    for platform in PLATFORMS:
        result = await platform.probe(p)
        if result is not None:
            p.walker.evidence.append(f"platform {platform.name}: {platform.matches}")
            return matched(result, platform)
    return replace(
        readings_only(p.base, p.chassis, p.gpus, p.cpus),
        platform=LEGACY_POWER,
        groups=tuple(p.classified.groups),
        note=NO_LIMIT,
    )
