"""Workload power profiles (WPPS): validate, request, read back, verify. Runs on the NVML thread.

Ids: requests use the out-of-band (Redfish/DPS) ids 3..258, NVML uses `nvmlPowerProfileType_t`
ids; **NVML id = out-of-band id - 3** (nvml.md §3, dps.md §6: nvidia-smi profile 1 is 4 through
Redfish). Conversion happens only here, in `to_nvml_id` / `to_oob_id`; results report
out-of-band ids, the device state keeps NVML ids.

Calls: `nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1` (R590+), falling back to the deprecated
Set/Clear-requested calls when the driver lacks it (NOT_SUPPORTED or FUNCTION_NOT_FOUND), as DCGM
does. The binding passes structs straight to C, so they go in as `ctypes.byref(...)`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml

from plugins.base import (
    DeviceControllerError,
    GpuProfileStatus,
    InvalidRequestError,
    ProfileChecks,
    ProfileResult,
    VerificationResult,
    write_log,
)
from plugins.nvml._errors import (
    TRANSIENT,
    describe,
    error_code,
    error_name,
    is_capability_absent,
    map_nvml_error,
)
from plugins.nvml._gpus import Gpu, Inventory
from plugins.nvml._state import NvmlState

#: out-of-band id = NVML id + OOB_OFFSET
OOB_OFFSET = 3
OOB_MIN = 3
OOB_MAX = 258
MASK_BITS = 256  # nvmlMask255_t: unsigned int mask[8]

#: NVML profile names by NVML id, from the binding (NVML_POWER_PROFILE_COMPUTE → "COMPUTE")
PROFILE_NAMES: dict[int, str] = {
    value: name.removeprefix("NVML_POWER_PROFILE_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_POWER_PROFILE_")
    and not name.startswith("NVML_POWER_PROFILE_OPERATION")
    and name != "NVML_POWER_PROFILE_MAX"
    and isinstance(value, int)
}

NOT_SUPPORTED = "workload power profiles are not supported on this GPU (they need Blackwell or newer)"


def to_nvml_id(oob_id: int) -> int:
    return oob_id - OOB_OFFSET


def to_oob_id(nvml_id: int) -> int:
    return nvml_id + OOB_OFFSET


def name_ids(nvml_ids: Iterable[int]) -> str:
    """`5 (COMPUTE), 7 (NETWORK)`: out-of-band ids with NVML's names."""
    parts = [
        f"{to_oob_id(i)} ({PROFILE_NAMES[i]})" if i in PROFILE_NAMES else str(to_oob_id(i))
        for i in sorted(nvml_ids)
    ]
    return ", ".join(parts) or "none"


def nvml_ids(oob_ids: Iterable[int]) -> set[int]:
    """Out-of-band ids → NVML ids; an id outside 3..258 is an invalid request."""
    ids = list(oob_ids)
    bad = [i for i in ids if not OOB_MIN <= i <= OOB_MAX]
    if bad:
        raise InvalidRequestError(
            f"workload profile id(s) {', '.join(map(str, bad))} outside {OOB_MIN}..{OOB_MAX} "
            f"(out-of-band ids: nvidia-smi id + {OOB_OFFSET})"
        )
    return {to_nvml_id(i) for i in ids}


def make_mask(ids: Iterable[int]) -> Any:
    mask = pynvml.c_nvmlMask255_t()
    for i in ids:
        mask.mask[i // 32] |= 1 << (i % 32)
    return mask


def mask_bits(mask: Any) -> set[int]:
    return {w * 32 + b for w in range(8) for b in range(32) if (mask.mask[w] >> b) & 1}


@dataclass(frozen=True)
class ProfilesInfo:
    supported: frozenset[int]
    priority: Mapping[int, int] = field(default_factory=dict)
    conflicts: Mapping[int, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class CurrentProfiles:
    supported: frozenset[int]
    requested: frozenset[int]
    enforced: frozenset[int]


def read_info(handle: Any) -> ProfilesInfo:
    info = pynvml.c_nvmlWorkloadPowerProfileProfilesInfo_v1_t()
    pynvml.nvmlDeviceWorkloadPowerProfileGetProfilesInfo(handle, ctypes.byref(info))
    supported = frozenset(mask_bits(info.perfProfilesMask))
    priority: dict[int, int] = {}
    conflicts: dict[int, frozenset[int]] = {}
    # The header does not say whether `perfProfile` is indexed by id or packed; unused entries
    # are zeroed (profileId 0), so the first entry for an id wins in both layouts.
    for entry in info.perfProfile:
        if entry.profileId in supported and entry.profileId not in priority:
            priority[entry.profileId] = entry.priority
            # the binding spells this field `conflictingmask` (nvml.md §3)
            conflicts[entry.profileId] = frozenset(mask_bits(entry.conflictingmask))
    return ProfilesInfo(supported, priority, conflicts)


def read_current(handle: Any) -> CurrentProfiles:
    current = pynvml.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
    pynvml.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(handle, ctypes.byref(current))
    return CurrentProfiles(
        frozenset(mask_bits(current.perfProfilesMask)),
        frozenset(mask_bits(current.requestedProfilesMask)),
        frozenset(mask_bits(current.enforcedProfilesMask)),
    )


def update(handle: Any, operation: int, ids: Iterable[int], label: str = "") -> None:
    """The profiles' write choke point: a receipt for each change; a dry run plans it and sends nothing."""
    ids = set(ids)
    if not ids:
        return
    log = write_log()
    verb = "clear" if operation == pynvml.NVML_POWER_PROFILE_OPERATION_CLEAR else "set"
    target = f"{_UPDATE}({label or 'GPU'})"
    body = {"operation": verb, "profiles": sorted(ids)}
    if log.dry_run:
        log.plan(target, _UPDATE, body, component=label)
        return
    with log.write(target, _UPDATE, body, component=label) as index:
        used = _update(handle, operation, ids)
    if used != _UPDATE:
        log.set_status(index, f"ok ({used}: the driver predates R590)")


_UPDATE = "nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1"


def _update(handle: Any, operation: int, ids: set[int]) -> str:
    """CLEAR or SET requested profiles, with the Set/Clear fallback for drivers before R590.

    Returns the NVML function that did it."""
    try:
        request = pynvml.c_nvmlWorkloadPowerProfileUpdateProfiles_v1_t()  # no version field
        request.operation = operation
        request.updateProfilesMask = make_mask(ids)
        pynvml.nvmlDeviceWorkloadPowerProfileUpdateProfiles_v1(handle, ctypes.byref(request))
        return _UPDATE
    except pynvml.NVMLError as exc:
        if error_code(exc) not in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            raise
    requested = pynvml.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t()
    requested.requestedProfilesMask = make_mask(ids)
    if operation == pynvml.NVML_POWER_PROFILE_OPERATION_CLEAR:
        pynvml.nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(handle, ctypes.byref(requested))
        return "nvmlDeviceWorkloadPowerProfileClearRequestedProfiles"
    pynvml.nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(handle, ctypes.byref(requested))
    return "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles"


def _conflicts(info: ProfilesInfo, wanted: set[int]) -> list[str]:
    notes = []
    for a in sorted(wanted):
        for b in sorted(info.conflicts.get(a, frozenset()) & wanted):
            if a < b:
                winner = min((a, b), key=lambda i: info.priority.get(i, 1 << 30))
                notes.append(
                    f"profiles {name_ids([a])} and {name_ids([b])} conflict: the GPU enforces "
                    f"{name_ids([winner])} (higher priority)"
                )
    return notes


def _status(gpu: Gpu, ok: bool, current: CurrentProfiles | None, message: str) -> GpuProfileStatus:
    enforced = tuple(to_oob_id(i) for i in sorted(current.enforced)) if current else ()
    return GpuProfileStatus(
        gpu_id=str(gpu.gpu_id), ok=ok, enforced=enforced, message=f"{gpu.label}: {message}"
    )


def _change_gpu(
    gpu: Gpu, enable: set[int], disable: set[int], state: NvmlState
) -> tuple[GpuProfileStatus, dict[str, Any] | None]:
    handle = gpu.require()
    try:
        info = read_info(handle)
    except pynvml.NVMLError as exc:
        if not is_capability_absent(exc):
            raise
        return _status(gpu, False, None, f"{NOT_SUPPORTED} ({error_name(error_code(exc))})"), None
    unsupported = (enable | disable) - info.supported
    before = read_current(handle)
    if unsupported:
        return (
            _status(
                gpu,
                False,
                before,
                f"profile(s) {name_ids(unsupported)} not supported by this GPU "
                f"(supported: {name_ids(info.supported)}); nothing changed",
            ),
            None,
        )
    if not (enable or disable):  # nothing to change: report what is in force
        return _status(gpu, True, before, f"enforced {name_ids(before.enforced)}"), None
    record = state.profile_record(gpu.uuid) or {}
    update(handle, pynvml.NVML_POWER_PROFILE_OPERATION_CLEAR, disable, gpu.label)
    update(handle, pynvml.NVML_POWER_PROFILE_OPERATION_SET, enable, gpu.label)
    after = read_current(handle)
    enabled = (set(record.get("enabled", [])) | enable) - disable
    state.record_profiles(gpu.uuid, set(before.requested), enabled)
    ok = enable <= after.requested and not (disable & after.requested)
    notes = [f"requested {name_ids(after.requested)}; enforced {name_ids(after.enforced)}"]
    if not ok:
        notes.append("NVML does not report the change in the requested set")
    if after.enforced != after.requested:
        notes.append("the GPU arbitrates between requested profiles by priority")
    notes += _conflicts(info, set(after.requested))
    expected = {"gpu_id": gpu.gpu_id, "on": sorted(enable), "off": sorted(disable)}
    return _status(gpu, ok, after, "; ".join(notes)), expected


def _guard(gpu: Gpu, fn: Any) -> tuple[GpuProfileStatus, dict[str, Any] | None]:
    error: DeviceControllerError
    try:
        result: tuple[GpuProfileStatus, dict[str, Any] | None] = fn()
        return result
    except pynvml.NVMLError as exc:
        error = map_nvml_error(exc, f"{gpu.label}: workload profiles")
    except DeviceControllerError as exc:
        error = exc
    return GpuProfileStatus(gpu_id=str(gpu.gpu_id), ok=False, message=str(error)), None


def _result(statuses: list[GpuProfileStatus]) -> ProfileResult:
    failed = [s for s in statuses if not s.ok]
    if not statuses:
        return ProfileResult(ok=False, error="no GPU on this node")
    error = ""
    if failed:
        error = f"{len(failed)} of {len(statuses)} GPU(s) failed: " + " | ".join(s.message for s in failed)
    return ProfileResult(ok=not failed, error=error, gpus=tuple(statuses))


def change(
    inv: Inventory, state: NvmlState, enable_oob: Iterable[int], disable_oob: Iterable[int]
) -> tuple[ProfileResult, dict[str, Any]]:
    """Enable/disable profiles on every GPU; returns the result and the verification payload."""
    enable, disable = nvml_ids(enable_oob), nvml_ids(disable_oob)
    both = enable & disable
    if both:
        raise InvalidRequestError(f"profile(s) {name_ids(both)} both enabled and disabled")
    statuses = []
    expected: dict[str, Any] = {}
    for gpu in inv.gpus:
        status, expect = _guard(gpu, lambda gpu=gpu: _change_gpu(gpu, enable, disable, state))
        statuses.append(status)
        if expect is not None:
            expected[gpu.uuid] = expect
    return _result(statuses), {"check": "workload_profiles", "id_space": "nvml", "gpus": expected}


def restore(inv: Inventory, state: NvmlState) -> ProfileResult | None:
    """Put every GPU's requested set back to what it was before devicectl's first change."""
    uuids = state.profile_uuids()
    if not uuids:
        return None
    by_uuid = {gpu.uuid: gpu for gpu in inv.gpus}
    statuses = []
    for uuid in uuids:
        gpu = by_uuid.get(uuid)
        record = state.profile_record(uuid) or {}
        if gpu is None:
            state.forget_profiles(uuid)  # a GPU no longer in the inventory at all
            continue

        def one(gpu: Gpu = gpu, record: Mapping[str, Any] = record) -> tuple[GpuProfileStatus, None]:
            handle = gpu.require()
            prior = set(record.get("prior_requested", []))
            current = read_current(handle)
            update(
                handle, pynvml.NVML_POWER_PROFILE_OPERATION_CLEAR, set(current.requested) - prior, gpu.label
            )
            update(handle, pynvml.NVML_POWER_PROFILE_OPERATION_SET, prior - set(current.requested), gpu.label)
            after = read_current(handle)
            state.forget_profiles(gpu.uuid)
            ok = set(after.requested) == prior
            msg = f"restored requested profiles to {name_ids(prior)}; enforced {name_ids(after.enforced)}"
            return _status(gpu, ok, after, msg), None

        statuses.append(_guard(gpu, one)[0])
    return _result(statuses)


def verify(payload: Mapping[str, Any]) -> VerificationResult:
    """Re-read the masks an earlier change asked for (verdicts: `plugins.base.ProfileChecks`)."""
    gpus = payload.get("gpus")
    if not isinstance(gpus, Mapping) or not gpus:
        return VerificationResult(True, "verified", "nothing to verify")
    checks = ProfileChecks(name_ids)
    for uuid, expect in gpus.items():
        label = f"GPU {expect.get('gpu_id', '?')} ({uuid})"
        try:
            current = read_current(pynvml.nvmlDeviceGetHandleByUUID(uuid))
        except pynvml.NVMLError as exc:
            code = error_code(exc)
            if code in TRANSIENT:
                checks.not_yet(label, describe(code))
                continue
            # lost, reset, unknown UUID, profiles gone after a driver change: checking again
            # will not help, so the verification ends as failed
            return VerificationResult(True, "failed", f"{label}: {describe(code)}")
        on, off = set(expect.get("on", ())), set(expect.get("off", ()))
        checks.observe(label, on, off, set(current.requested), set(current.enforced))
    return checks.result()
