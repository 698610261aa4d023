"""Two-phase entity modification: the phase-0 decision table, shared by the plugins.

The first matching row wins, top to bottom (docs/desired-state.md has the table with phase 1):

1. the GPU count changes to one the device contradicts: `REJECTED`, naming both counts;
2. BMC address, credentials (secret name) or platform (`Model`) change: `ACCEPTED_CALL_PHASE_1`
   (phase 1 drops the old endpoint's sessions and discovery and discovers the new one);
3. a new default policy while the node is allocated: `ACCEPTED_CALL_PHASE_1` (applied at phase 1);
4. anything else: `ACCEPTED`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from plugins.base._spec import SystemSpec
from plugins.base._types import EntityModification, EntityModificationResult, EntityVerdict


@dataclass(frozen=True)
class EntityFacts:
    """What the plugin knows of the device (from its state), for the decision."""

    #: a resource group's (or any non-default) policy is in force
    allocated: bool = False
    #: GPUs the device reports (discovery or enumeration); None when not known yet
    reported_gpus: int | None = None


def endpoint_changes(req: EntityModification) -> list[str]:
    """What about reaching the device changes: BMC address, credentials, platform."""
    old, new = _spec(req.old_model), _spec(req.new_model)
    changes = []
    if old.redfish_url != new.redfish_url:
        changes.append("BMC address")
    if old.secret_name != new.secret_name:
        changes.append("credentials")
    if _platform(req.old_model, old) != _platform(req.new_model, new):
        changes.append("platform")
    return changes


def policy_changes(req: EntityModification) -> bool:
    return req.old_default_policy != req.new_default_policy


def decide(req: EntityModification, facts: EntityFacts) -> EntityModificationResult:
    """The phase-0 verdict (see the module docstring's table)."""
    old, new = _spec(req.old_model), _spec(req.new_model)
    if (
        new.gpu.count != old.gpu.count
        and facts.reported_gpus is not None
        and new.gpu.count != facts.reported_gpus
    ):
        return EntityModificationResult(
            EntityVerdict.REJECTED,
            f"the new model has {new.gpu.count} GPU(s), but the device reports {facts.reported_gpus}",
        )
    changes = endpoint_changes(req)
    if changes:
        return EntityModificationResult(
            EntityVerdict.ACCEPTED_CALL_PHASE_1,
            f"{', '.join(changes)} changed: phase 1 drops the old endpoint's sessions and discovery "
            "and discovers the new one",
        )
    if facts.allocated and policy_changes(req):
        return EntityModificationResult(
            EntityVerdict.ACCEPTED_CALL_PHASE_1,
            "a new default policy while the node is allocated: applied at phase 1",
        )
    return EntityModificationResult(EntityVerdict.ACCEPTED, "no device-side change needed")


def _spec(model: object) -> SystemSpec:
    try:
        return SystemSpec.from_model(model)  # type: ignore[arg-type]
    except (TypeError, ValueError, AttributeError):
        return SystemSpec()


def _platform(model: object, spec: SystemSpec) -> str:
    raw = (model.get("Model") or model.get("model")) if isinstance(model, Mapping) else None
    return str(raw or spec.model or "")
