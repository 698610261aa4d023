"""Two-phase entity modification on an NVML node (decision table: `plugins.base.entity`).

In-band there is no endpoint to re-discover: an address, credential or platform change is
accepted with phase 1, which only re-reads the GPUs. A new default policy while a resource group
is active becomes the topology layer at phase 1 (the group's policy stays on top until it ends).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugins.base import (
    EntityModification,
    EntityModificationResult,
    EntityVerdict,
    Outcome,
    PolicyAction,
    PolicyChange,
)
from plugins.base.entity import EntityFacts, decide, endpoint_changes, policy_changes
from plugins.nvml._state import NvmlState

if TYPE_CHECKING:
    from plugins.base import DeviceContext, DevicePlugin


def facts(state: NvmlState) -> EntityFacts:
    known = state.known_gpus()
    return EntityFacts(allocated=state.resource_group() is not None, reported_gpus=len(known) or None)


async def modify_entity(
    plugin: DevicePlugin, ctx: DeviceContext, req: EntityModification
) -> Outcome[EntityModificationResult]:
    """`plugin` is the NVML plugin; only its `set_policy` is used (typed by the contract's base, so
    this module need not import the plugin module that imports it)."""
    state = NvmlState(ctx.state)
    if req.phase == 0:
        return Outcome(decide(req, facts(state)))
    done = []
    new_state = None
    if policy_changes(req) and state.resource_group() is not None:
        policy = req.new_default_policy
        change = PolicyChange(PolicyAction.SET, policy) if policy else PolicyChange(PolicyAction.UNSET)
        applied = await plugin.set_policy(ctx, change)
        if not applied.result.ok:
            message = f"the new default policy could not be applied: {applied.result.error}"
            return Outcome(EntityModificationResult(EntityVerdict.REJECTED, message), state=applied.state)
        new_state = applied.state
        done.append(f"applied the new default policy {policy.name if policy else '(none)'}")
    if endpoint_changes(req):
        done.append("nothing cached in-band for the old endpoint")
    message = "; ".join(done) or "phase 1: nothing to do"
    return Outcome(EntityModificationResult(EntityVerdict.ACCEPTED, message), state=new_state)
