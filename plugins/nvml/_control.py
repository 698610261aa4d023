"""The request kinds as synchronous jobs for the NVML thread: state in, result and new state out.

Each job enumerates the GPUs afresh (cheap: microseconds per call), updates the policy layers in
the state, and reconciles every GPU with them, so a repeated request is idempotent (a limit that
is already in force is not written again) and a limit that reverted is put back.
"""

from __future__ import annotations

from typing import Any

from plugins.base import (
    Allocation,
    AllocationResult,
    ElementType,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuResult,
    InvalidRequestError,
    Policy,
    PolicyAction,
    ProfileChange,
    ProfileResult,
    SystemSpec,
)
from plugins.nvml import _profiles
from plugins.nvml._gpus import Inventory, enumerate_gpus
from plugins.nvml._power import NOT_IN_BAND, out_of_band_components, reconcile
from plugins.nvml._state import NvmlState

#: a job's answer: the result, the new state JSON, and a verification payload (or None)
Answer = tuple[Any, dict[str, Any], dict[str, Any] | None]


def inventory(state: NvmlState) -> Inventory:
    """Enumerate the GPUs (keeping known ones' slots) and record them in the state."""
    inv = enumerate_gpus(state.known_gpus())
    state.set_known_gpus(inv.known())
    # Records of GPUs that left the node (a board replaced in its slot) can never be restored.
    state.prune({gpu.uuid for gpu in inv.gpus})
    return inv


def _summary(results: list[GpuResult]) -> str:
    failed = [r for r in results if not r.ok]
    if not failed:
        return ""
    return f"{len(failed)} of {len(results)} GPU(s) failed: " + " | ".join(r.message for r in failed)


def _allocation_result(
    *,
    group: str,
    spec: SystemSpec,
    state: NvmlState,
    results: list[GpuResult] | None,
    profiles: ProfileResult | None = None,
) -> AllocationResult:
    policy = state.effective_policy()
    components = out_of_band_components(spec, policy)
    errors = []
    if results is not None:
        if summary := _summary(results):
            errors.append(summary)
        if components and not results and policy is not None and policy.limit_for(ElementType.GPU) is None:
            # Nothing NVML controls was asked for: say so rather than report success.
            names = ", ".join(e.value for e in components)
            errors.append(f"the policy sets no GPU limit, and {names}: {NOT_IN_BAND}")
    if profiles is not None and not profiles.ok:
        errors.append(f"workload profiles: {profiles.error}")
    return AllocationResult(
        ok=not errors,
        error="; ".join(errors),
        resource_group=group,
        policy=policy,
        power_cap_watts=0.0,  # NVML sets no node cap
        gpu_policies=GpuPoliciesResult(group, tuple(results)) if results is not None else None,
        profiles=profiles,
        node=components.get(ElementType.NODE),
        cpu=components.get(ElementType.CPU),
        memory=components.get(ElementType.MEMORY),
    )


def topology_set(raw_state: Any, spec: SystemSpec, scope: str, policy: Policy) -> Answer:
    state = NvmlState(raw_state)
    inv = inventory(state)
    state.set_topology(policy)
    results = reconcile(inv, state, scope, reset_untracked=False)
    return _allocation_result(group="", spec=spec, state=state, results=results), state.to_json(), None


def topology_unset(raw_state: Any, spec: SystemSpec, scope: str) -> Answer:
    """Clean up everything: apply the spec's idle policy if it has one, else restore the limits."""
    state = NvmlState(raw_state)
    inv = inventory(state)
    state.clear_resource_group()
    state.clear_gpu_layer()
    state.set_topology(spec.idle_policy, source="idle")
    results = reconcile(inv, state, scope, reset_untracked=True)
    profiles = _profiles.restore(inv, state)
    result = _allocation_result(group="", spec=spec, state=state, results=results, profiles=profiles)
    return result, state.to_json(), None


def topology_retain(raw_state: Any, spec: SystemSpec, scope: str) -> Answer:
    """Retain the limits in force: nothing is written, and the topology's layer stays, so later
    requests keep its limits until the next topology activation replaces it."""
    state = NvmlState(raw_state)
    result = _allocation_result(group="", spec=spec, state=state, results=None)
    return result, state.to_json(), None


def _removed(change: GpuPoliciesChange | None) -> set[int]:
    """GPUs whose GPU-specific cap the change removes (`limit=None`)."""
    if change is None or change.action is not PolicyAction.SET:
        return set()
    return {p.gpu_id for p in change.policies if p.limit is None}


def _apply_gpu_change(state: NvmlState, change: GpuPoliciesChange, group: str) -> bool:
    """Update the GPU layer; True when it was a reset."""
    if change.action is PolicyAction.SET:
        state.update_gpu_layer(change.resource_group or group, change.current_policy, change.policies)
        return False
    state.clear_gpu_layer()
    return True


def _apply_profiles(
    inv: Inventory, state: NvmlState, change: ProfileChange
) -> tuple[ProfileResult, dict[str, Any] | None]:
    result, payload = _profiles.change(inv, state, change.enable, change.disable)
    return result, payload if change.verify and payload["gpus"] else None


def allocation(raw_state: Any, spec: SystemSpec, scope: str, req: Allocation, kind: str) -> Answer:
    """Resource group activate / update / deactivate."""
    state = NvmlState(raw_state)
    inv = inventory(state)
    reset = False
    if kind == "deactivate":
        # Deactivation removes the group's layers whatever the request carries, so that a job's
        # caps never leak into the next job; the topology (or idle) policy applies again.
        current = state.resource_group()
        layer = state.gpu_layer()
        group = req.resource_group or (current[0] if current else "")
        # Unset semantics (default limit when nothing was recorded) only if the group capped
        # anything; a group that only enabled profiles leaves untracked limits alone.
        reset = bool(current and current[1]) or bool(layer and layer[0] in ("", group))
        state.clear_resource_group()
        state.clear_gpu_layer(group or None)
        caps = True
    else:
        current = state.resource_group()
        # A part that is None means "no change": keep the group's policy when it is the same group.
        policy = current[1] if current and current[0] == req.resource_group else None
        if req.policy is not None:
            policy = req.policy.policy if req.policy.action is PolicyAction.SET else None
            if req.policy.action is PolicyAction.SET and policy is None:
                raise InvalidRequestError("a SET policy change needs a policy")
            reset = req.policy.action is PolicyAction.UNSET
        state.set_resource_group(req.resource_group, policy)
        if req.gpu_policies is not None:
            reset = _apply_gpu_change(state, req.gpu_policies, req.resource_group) or reset
        caps = req.policy is not None or req.gpu_policies is not None
    removed = _removed(req.gpu_policies) if kind != "deactivate" else set()
    results = reconcile(inv, state, scope, reset_untracked=reset, removed=removed) if caps else None
    payload = None
    profiles: ProfileResult | None = None
    if req.profiles is not None:
        profiles, payload = _apply_profiles(inv, state, req.profiles)
    elif kind == "deactivate":
        profiles = _profiles.restore(inv, state)
    result = _allocation_result(
        group=req.resource_group, spec=spec, state=state, results=results, profiles=profiles
    )
    return result, state.to_json(), payload


def gpu_policies(raw_state: Any, scope: str, req: GpuPoliciesChange) -> Answer:
    state = NvmlState(raw_state)
    inv = inventory(state)
    reset = _apply_gpu_change(state, req, req.resource_group)
    results = reconcile(inv, state, scope, reset_untracked=reset, removed=_removed(req))
    return GpuPoliciesResult(req.resource_group, tuple(results)), state.to_json(), None


def profiles(raw_state: Any, change: ProfileChange) -> Answer:
    state = NvmlState(raw_state)
    inv = inventory(state)
    result, payload = _apply_profiles(inv, state, change)
    return result, state.to_json(), payload
