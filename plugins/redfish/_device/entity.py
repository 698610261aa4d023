"""Two-phase entity modification on a Redfish BMC (decision table: `plugins.base.entity`).

Phase 1 after a BMC address, credential or platform change drops what is cached for the old
endpoint (its pooled client and Redfish session, the discovery and readings in the state) and
discovers the new one. A new default policy while a resource group is active is applied at phase 1
as the topology policy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from plugins.base import (
    AllocationResult,
    EntityModification,
    EntityModificationResult,
    EntityVerdict,
    Outcome,
    PolicyAction,
    PolicyChange,
)
from plugins.base.entity import EntityFacts, decide, endpoint_changes, policy_changes
from plugins.redfish._device.device import prepare
from plugins.redfish._device.state import DeviceState

if TYPE_CHECKING:
    from plugins.base import DeviceContext
    from plugins.redfish._client.pool import BmcPool
    from plugins.redfish._config import RedfishSettings


class EntityHost(Protocol):
    """What a modification uses of `plugins.redfish._plugin.RedfishPlugin` (which calls this
    module, so it names a protocol, not the class)."""

    @property
    def pool(self) -> BmcPool: ...

    @property
    def settings(self) -> RedfishSettings: ...

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]: ...


def _allocated(state: DeviceState) -> bool:
    return any(scope.startswith("rg:") for scope in state.scopes())


def facts(state: DeviceState) -> EntityFacts:
    found = state.discovery
    return EntityFacts(allocated=_allocated(state), reported_gpus=len(found.gpus) if found else None)


async def modify_entity(
    plugin: EntityHost, ctx: DeviceContext, req: EntityModification
) -> Outcome[EntityModificationResult]:
    state = DeviceState(ctx.state)
    if req.phase == 0:
        return Outcome(decide(req, facts(state)))
    done = []
    ctx = replace(ctx, model={**ctx.model, **req.new_model})
    changes = endpoint_changes(req)
    if changes:
        await plugin.pool.forget(ctx.device_id)  # the old BMC's client and session go
        state.discovery = None
        state.clear_readings()
        ctx = replace(ctx, state=state.to_json())
        device = await prepare(plugin.pool, plugin.settings, ctx)  # discovers the new endpoint
        ctx = replace(ctx, state=device.state.to_json())
        found = device.discovery
        done.append(f"{', '.join(changes)} changed: re-discovered {found.platform} at {found.url}")
    new_state = ctx.state if changes else None
    if policy_changes(req) and _allocated(state):
        policy = req.new_default_policy
        change = PolicyChange(PolicyAction.SET, policy) if policy else PolicyChange(PolicyAction.UNSET)
        applied = await plugin.set_policy(ctx, change)
        new_state = applied.state
        if not applied.result.ok:
            message = f"the new default policy could not be applied: {applied.result.error}"
            return Outcome(EntityModificationResult(EntityVerdict.REJECTED, message), state=new_state)
        done.append(f"applied the new default policy {policy.name if policy else '(none)'}")
    message = "; ".join(done) or "phase 1: nothing to do"
    return Outcome(EntityModificationResult(EntityVerdict.ACCEPTED, message), state=new_state)
