"""Power limits: read, validate, set, read back, restore; and reconciling GPUs with the policy layers.

Units: requests and results are in watts, NVML in milliwatts (`unsigned int`); conversion happens
only here (`to_mw` / `to_watts`). Runs on the NVML thread.

Quirks handled (nvml.md §2.2, §8):
- the stock `nvmlDeviceSetPowerManagementLimit_v2` wrapper never checks the return code, so GPU
  scope uses the v1 setter and module scope a checked call of the same C function;
- validation against `nvmlDeviceGetPowerManagementLimitConstraints` happens before any write, and
  the message names the allowed range;
- after every write both the requested limit and the *enforced* one (all limiters, including
  out-of-band ones) are read back and reported;
- limits do not survive a driver unload when persistence mode is off: the result says so.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

import pynvml

from plugins.base import (
    ComponentResult,
    ComponentSpec,
    DeviceControllerError,
    ElementType,
    GpuResult,
    Policy,
    SystemSpec,
    UnsupportedError,
    gpu_targets,
    write_log,
)
from plugins.nvml._errors import is_capability_absent, map_nvml_error
from plugins.nvml._gpus import Gpu, Inventory
from plugins.nvml._state import NvmlState

GPU_SCOPE = "gpu"
MODULE_SCOPE = "module"
SCOPES = {GPU_SCOPE: pynvml.NVML_POWER_SCOPE_GPU, MODULE_SCOPE: pynvml.NVML_POWER_SCOPE_MODULE}
#: the NVML setter each scope's limit is written with (named in receipts)
SETTERS = {
    GPU_SCOPE: "nvmlDeviceSetPowerManagementLimit",
    MODULE_SCOPE: "nvmlDeviceSetPowerManagementLimit_v2",
}

NOT_IN_BAND = "not controllable in-band by NVML; use an out-of-band plugin (e.g. redfish) for it"
PERSISTENCE_OFF = (
    "persistence mode is off: this limit reverts to the default when the driver unloads "
    "(run nvidia-persistenced)"
)


def to_mw(watts: float) -> int:
    return round(watts * 1000)


def to_watts(mw: int) -> float:
    return mw / 1000.0


@dataclass(frozen=True)
class Limits:
    """One GPU's limits in one scope, in mW."""

    min_mw: int
    max_mw: int
    default_mw: int
    requested_mw: int
    enforced_mw: int

    def spec(self, count: int) -> ComponentSpec:
        return ComponentSpec(count=count, min_watts=to_watts(self.min_mw), max_watts=to_watts(self.max_mw))


# ---- reads and writes ---------------------------------------------------------------------


def module_scope_supported(handle: Any) -> bool:
    """Module scope (GPU + Grace CPU) exists on superchips, recognised by C2C mode (as Zeus does)."""
    try:
        return bool(pynvml.nvmlDeviceGetC2cModeInfoV(handle).isC2cEnabled)
    except pynvml.NVMLError as exc:
        if is_capability_absent(exc):
            return False
        raise


def _require_module_scope(handle: Any) -> None:
    if not module_scope_supported(handle):
        raise UnsupportedError(
            "module power scope is only available on Grace superchips (GH200, GB200, GB300); "
            'this GPU has no C2C link: use power_scope = "gpu"'
        )


_VALUE_FIELDS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_values(handle: Any, fields: list[tuple[int, int]]) -> list[float]:
    """Read field values, raising the first per-entry error.

    `nvmlDeviceGetFieldValues` succeeds when *any* value was filled, so each entry's own
    `nvmlReturn` must be checked (nvml.md §2.2).
    """
    values = pynvml.nvmlDeviceGetFieldValues(handle, fields)
    out: list[float] = []
    for entry in values:
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(entry.nvmlReturn)
        out.append(getattr(entry.value, _VALUE_FIELDS.get(entry.valueType, "uiVal")))
    return out


def read_limits(handle: Any, scope: str) -> Limits:
    if scope == GPU_SCOPE:
        lo, hi = pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        return Limits(
            min_mw=int(lo),
            max_mw=int(hi),
            default_mw=int(pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)),
            requested_mw=int(pynvml.nvmlDeviceGetPowerManagementLimit(handle)),
            enforced_mw=int(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)),
        )
    _require_module_scope(handle)
    module = pynvml.NVML_POWER_SCOPE_MODULE
    lo, hi, default, requested, enforced = field_values(
        handle,
        [
            (pynvml.NVML_FI_DEV_POWER_MIN_LIMIT, module),
            (pynvml.NVML_FI_DEV_POWER_MAX_LIMIT, module),
            (pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT, module),
            (pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT, module),
            (pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT, module),
        ],
    )
    return Limits(int(lo), int(hi), int(default), int(requested), int(enforced))


def set_limit(
    handle: Any, scope: str, limit_mw: int, *, label: str = "", before_mw: int | None = None
) -> int:
    """The plugin's one write choke point: record a receipt, and write unless this is a dry run.

    Returns the receipt's index (for the read-back).
    """
    log = write_log()
    function = SETTERS[scope]
    target = f"{function}({label or 'GPU'})"
    body = {"scope": scope, "limit_mw": limit_mw}
    before = to_watts(before_mw) if before_mw is not None else None
    if log.dry_run:
        return log.plan(target, function, body, component=label, before=before)
    with log.write(target, function, body, component=label, before=before) as index:
        _set_limit(handle, scope, limit_mw)
    return index


def _set_limit(handle: Any, scope: str, limit_mw: int) -> None:
    """Write a limit with a setter that raises on failure."""
    if scope == GPU_SCOPE:
        pynvml.nvmlDeviceSetPowerManagementLimit(handle, limit_mw)
        return
    # pynvml.nvmlDeviceSetPowerManagementLimit_v2 discards the C return code (nvml.md §2.2), so
    # call the C function ourselves and check what it returns.
    value = pynvml.c_nvmlPowerValue_v2_t()
    value.version = pynvml.nvmlPowerValue_v2
    value.powerScope = SCOPES[scope]
    value.powerValueMw = limit_mw
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceSetPowerManagementLimit_v2")
    pynvml._nvmlCheckReturn(fn(handle, ctypes.byref(value)))


def persistence_off(handle: Any) -> bool:
    try:
        return bool(pynvml.nvmlDeviceGetPersistenceMode(handle) == pynvml.NVML_FEATURE_DISABLED)
    except pynvml.NVMLError as exc:
        if is_capability_absent(exc):
            return False  # not a Linux driver feature here: nothing to warn about
        raise


# ---- one GPU -------------------------------------------------------------------------------


def _describe(after: Limits) -> str:
    enforced = f"enforced {to_watts(after.enforced_mw):g} W"
    if after.enforced_mw < after.requested_mw:
        enforced += ": a lower limit from another limiter (e.g. the BMC) is in force"
    return enforced


def _write(gpu: Gpu, scope: str, before: Limits, target_mw: int, action: str, state: NvmlState) -> GpuResult:
    handle = gpu.require()
    notes: list[str] = []
    record = state.limit_record(gpu.uuid, scope)
    ours = record.get("requested_mw") if record else None
    if ours is not None and ours != before.requested_mw:
        notes.append(
            f"the limit was {to_watts(before.requested_mw):g} W instead of the {to_watts(ours):g} W set "
            "earlier (driver reload with persistence mode off, or another tool)"
        )
    wrote = before.requested_mw != target_mw
    log = write_log()
    if wrote:
        index = set_limit(handle, scope, target_mw, label=gpu.label, before_mw=before.requested_mw)
    elif log.dry_run:
        body = {"scope": scope, "limit_mw": target_mw}
        log.skip(
            SETTERS[scope],
            body,
            component=gpu.label,
            before=to_watts(before.requested_mw),
            note="already in force",
        )
    if log.dry_run:  # nothing was written: what the write would leave in force
        after = replace(before, requested_mw=target_mw, enforced_mw=target_mw) if wrote else before
    else:
        after = read_limits(handle, scope)
        if wrote:
            log.read_back(index, to_watts(after.requested_mw))
    ok = after.requested_mw == target_mw
    verb = action if wrote else f"{action} (already in force)"
    head = f"{verb} {to_watts(target_mw):g} W"
    if scope == MODULE_SCOPE:
        head += " (module scope)"
    if not ok:
        head += f", but NVML reads back {to_watts(after.requested_mw):g} W"
    if after.requested_mw != after.default_mw and persistence_off(handle):
        notes.append(PERSISTENCE_OFF)
    message = "; ".join([f"{head}; {_describe(after)}", *notes])
    return GpuResult(
        gpu.gpu_id,
        ok,
        applied_watts=to_watts(after.enforced_mw),
        requested_watts=to_watts(target_mw),
        message=f"{gpu.label}: {message}",
    )


def apply_target(gpu: Gpu, scope: str, limits: Limits, watts: float, state: NvmlState) -> GpuResult:
    """Set an already validated target, recording the prior limit first (first change only)."""
    target_mw = to_mw(watts)
    state.record_prior(gpu.uuid, scope, limits.requested_mw)
    result = _write(gpu, scope, limits, target_mw, "set", state)
    state.record_requested(gpu.uuid, scope, target_mw)
    return result


def restore(gpu: Gpu, scopes: list[str], state: NvmlState) -> GpuResult:
    """Put back the limit recorded before devicectl's first change, else the default limit."""
    results = []
    for scope in scopes:
        handle = gpu.require()
        limits = read_limits(handle, scope)
        record = state.limit_record(gpu.uuid, scope) or {}
        prior = record.get("prior_mw")
        if isinstance(prior, int) and limits.min_mw <= prior <= limits.max_mw:
            target, action = prior, "restored the limit from before devicectl's change:"
        elif isinstance(prior, int):
            target = limits.default_mw
            action = (
                f"the recorded {to_watts(prior):g} W is outside today's "
                f"{to_watts(limits.min_mw):g}..{to_watts(limits.max_mw):g} W, so restored the default"
            )
        else:
            target, action = limits.default_mw, "restored the default limit (no earlier value recorded):"
        result = _write(gpu, scope, limits, target, action, state)
        results.append(result)
        if result.ok:  # keep the record until the restore is confirmed by the read-back
            state.forget_limit(gpu.uuid, scope)
    ok = all(r.ok for r in results)
    return GpuResult(
        gpu.gpu_id,
        ok,
        applied_watts=results[-1].applied_watts,
        requested_watts=results[-1].requested_watts,
        message=" | ".join(r.message for r in results),
    )


# ---- the whole node --------------------------------------------------------------------------


def _guarded(gpu: Gpu, what: str, fn: Callable[[], GpuResult | None]) -> GpuResult | None:
    """Run one GPU's work; its failure becomes that GPU's result and never stops the others."""
    error: DeviceControllerError
    try:
        return fn()
    except pynvml.NVMLError as exc:
        error = map_nvml_error(exc, f"{gpu.label}: {what}")
    except DeviceControllerError as exc:
        error = exc
    return GpuResult(gpu.gpu_id, False, message=str(error))


def reconcile(
    inv: Inventory,
    state: NvmlState,
    scope: str,
    *,
    reset_untracked: bool,
    removed: Collection[int] = (),
) -> list[GpuResult]:
    """Bring every GPU to the cap the policy layers in `state` ask for.

    GPUs with a target get it (validated against their own constraints first). GPUs without one
    get the limit recorded before devicectl's first change back; with `reset_untracked` (an
    "unset"), GPUs with no record get their default limit, and so do the GPUs in `removed` (whose
    GPU-specific cap the request removed: `--gpu N=none`), so that a removal always ends with a
    write or a read-back that shows no cap of devicectl's. Other GPUs are not touched.
    """
    policy = state.effective_policy()
    gpu_policies = state.gpu_policies()
    ids = inv.ids
    results: list[GpuResult] = []
    for gpu_id, target in sorted(gpu_targets(SystemSpec(), None, gpu_policies, ids).items()):
        if gpu_id not in ids:  # a GPU-specific policy for a GPU this node does not have
            results.append(GpuResult(gpu_id, False, message=target.error))
    wants_share = policy is not None and policy.limit_for(ElementType.GPU) is not None
    specific = {p.gpu_id for p in gpu_policies if p.limit is not None}

    def one(gpu: Gpu) -> GpuResult | None:
        if wants_share or gpu.gpu_id in specific:
            limits = read_limits(gpu.require(), scope)
            # Each GPU is checked against its own NVML constraints (mixed models are possible);
            # percentages resolve against its own maximum.
            spec = SystemSpec(gpu=limits.spec(len(ids)))
            target = gpu_targets(spec, policy, gpu_policies, ids).get(gpu.gpu_id)
            if target is not None:
                if not target.ok or target.watts is None:
                    return GpuResult(gpu.gpu_id, False, requested_watts=target.watts, message=target.error)
                return apply_target(gpu, scope, limits, target.watts, state)
        scopes = state.recorded_scopes(gpu.uuid)
        if not scopes and (reset_untracked or gpu.gpu_id in removed):
            scopes = [scope]
        return restore(gpu, scopes, state) if scopes else None

    for gpu in inv.gpus:
        result = _guarded(gpu, "power limit", functools.partial(one, gpu))
        if result is not None:
            results.append(result)
    return sorted(results, key=lambda r: r.gpu_id)


def out_of_band_components(spec: SystemSpec, policy: Policy | None) -> dict[ElementType, ComponentResult]:
    """Node, CPU and memory limits of the policy, each reported as not controllable in-band."""
    out: dict[ElementType, ComponentResult] = {}
    if policy is None:
        return out
    for element in (ElementType.NODE, ElementType.CPU, ElementType.MEMORY):
        limit = policy.limit_for(element)
        if limit is None:
            continue
        comp = spec.component(element)
        count = max(comp.count, 1)
        try:
            requested: float | None = limit.resolve(comp.max_watts * count if comp.max_watts else None)
        except ValueError:
            requested = None
        asked = f" (the policy asks for {requested:g} W)" if requested is not None else ""
        out[element] = ComponentResult(
            ok=False, requested_watts=requested, message=f"{element.value}: {NOT_IN_BAND}{asked}"
        )
    return out
