"""Which of our read-backs an operation offers as priors, and the prior after a refused one
(docs/redfish.md, "Read-backs as priors"; the cache itself: `plugins.redfish._client.readbacks`)."""

from __future__ import annotations

from dataclasses import replace

from plugins.redfish._capping.caps import CapChange
from plugins.redfish._client.readbacks import Priors
from plugins.redfish._device.device import Device
from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms import LimitReading, mechanism_for
from plugins.redfish._wire.document import Document


def corrected(change: CapChange, used: Priors) -> CapChange:
    """The change with its `before` read again where the BMC refused the read-back's ETag (412):
    the value someone else set meanwhile, not our stale read-back, is the prior to restore."""
    fresh = used.fresh.get(change.component.limit_uri)
    mech = mechanism_for(change.component)
    if fresh is None or mech is None or change.before is None:
        return change
    return replace(change, before=mech.parse(change.component, fresh))


def read_back_for(
    device: Device, comp: Component, watts: float
) -> tuple[float, Document, LimitReading] | None:
    """When our valid read-back of the component's limit was read (and the read-back, parsed, and
    the mechanism's parse of it), where it may stand in for the pre-write GET:
    only when it shows a value clearly off the target, so a write follows (whose `If-Match`, where
    the policy sends one, the BMC checks). "Already in force" is never judged from it: that answer
    sends nothing, so the BMC must say it."""
    found = device.bmc.client.read_backs.peek(comp.limit_uri)
    mech = mechanism_for(comp)
    if found is None or mech is None:
        return None
    try:
        reading: LimitReading = mech.parse(comp, found[0])
    except Exception:  # whatever the parser makes of it, a fresh GET decides
        return None
    return (found[1], found[0], reading) if _write_follows(reading, watts) else None


def discovered_read(device: Device, comp: Component, watts: float) -> tuple[Document, LimitReading] | None:
    """Where this operation discovered the BMC, its GET of the component's limit as the first
    change's pre-write read (taken once), with the mechanism's parse of it: only while nothing was
    written to the resource, nor failed, since that GET was sent (its read-back ticket, no
    read-back kept), and, as for a read-back, only when it shows a value clearly off the target."""
    read = device.limit_reads.pop(comp.limit_uri, None)
    read_backs = device.bmc.client.read_backs
    mech = mechanism_for(comp)
    if read is None or mech is None:
        return None
    if read_backs.ticket(comp.limit_uri) != read.ticket or read_backs.peek(comp.limit_uri) is not None:
        return None
    try:
        reading: LimitReading = mech.parse(comp, read.doc)
    except Exception:  # whatever the parser makes of it, a fresh GET decides
        return None
    return (read.doc, reading) if _write_follows(reading, watts) else None


def _write_follows(reading: LimitReading, watts: float) -> bool:
    """Whether the reading is clearly off `watts` (or uncapped), so a write follows: "already in
    force" sends nothing, so the BMC must say it in a GET of its own."""
    if not reading.capped:
        return True
    if reading.watts is None or not reading.in_watts:
        return False
    return abs(reading.watts - watts) > max(reading.increment or 0.0, 1.0) + 0.5
