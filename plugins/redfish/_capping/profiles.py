"""NVIDIA workload power profiles (WPPS): enable, disable, restore and verify, per GPU.

GET `…/Processors/{GPU}/Oem/Nvidia/WorkloadPowerProfile`, POST `{"ProfileMask": "0x…"}` to the
target its `Actions` list for `#NvidiaWorkloadPower.EnableProfiles` (or `DisableProfiles`), then GET
the resource to read back `RequestedProfileMask` and `EnforcedProfileMask`. The POST goes only to
the target the BMC lists (NVIDIA's bmcweb lists both actions with their targets and ActionInfo in
that resource); a resource that lists none is refused, nothing sent, never a URI built by habit.
The firmware arbitrates conflicting profiles, so the enforced set may differ from the requested
one: that is reported, not failed (dps.md §6).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plugins.base import (
    DeviceControllerError,
    GpuProfileStatus,
    InvalidRequestError,
    PendingVerification,
    ProfileChange,
    ProfileChecks,
    ProfileResult,
    VerificationResult,
    gather_writes,
)
from plugins.redfish._capping.outcome import (
    ANSWER_LOST,
    annotate,
    landed,
    may_have_landed,
    not_landed,
    unread,
)
from plugins.redfish._capping.results import summarize
from plugins.redfish._device.device import Device
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms import unsupported_message
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import PlatformUnsupportedError

#: DPS/Redfish ("out-of-band") profile ids are NVML ids + 3 (dps.md §6)
PROFILE_ID_OFFSET = 3
MIN_PROFILE_ID, MAX_PROFILE_ID = 3, 258
ENABLE = "NvidiaWorkloadPower.EnableProfiles"
DISABLE = "NvidiaWorkloadPower.DisableProfiles"
VERIFY_KIND = "workload_profiles"


def to_mask(ids: Iterable[int]) -> int:
    """Profile ids (3..258) to a bit mask.

    NOTE: bit n is the profile with NVML id n, i.e. DPS/Redfish id n + 3. redfish.md §2.4 calls the
    numbering unverified on real BMCs (a 256-bit mask cannot index ids up to 258 directly); the
    simulator and this plugin agree on NVML numbering. Change only `PROFILE_ID_OFFSET` if a real BMC
    proves otherwise.
    """
    mask = 0
    for pid in ids:
        mask |= 1 << (pid - PROFILE_ID_OFFSET)
    return mask


def to_ids(mask: int) -> list[int]:
    """Bit mask to profile ids (3..258)."""
    return [bit + PROFILE_ID_OFFSET for bit in range(mask.bit_length()) if mask >> bit & 1]


def format_mask(mask: int) -> str:
    """`0x` and 64 hex digits, as NVIDIA bmcweb prints masks."""
    return f"0x{mask:064x}"


def parse_mask(value: Any) -> int:
    """A `"0x…"` mask string (any length) to an int; garbage reads as 0."""
    try:
        return int(str(value), 16)
    except (TypeError, ValueError):
        return 0


def validate(change: ProfileChange) -> None:
    """Reject ids outside 3..258 and ids both enabled and disabled."""
    bad = sorted({p for p in (*change.enable, *change.disable) if not MIN_PROFILE_ID <= p <= MAX_PROFILE_ID})
    if bad:
        raise InvalidRequestError(
            f"workload profile id(s) {', '.join(map(str, bad))} out of range: out-of-band ids are "
            f"{MIN_PROFILE_ID}..{MAX_PROFILE_ID} (NVML/nvidia-smi id + {PROFILE_ID_OFFSET})"
        )
    both = sorted(set(change.enable) & set(change.disable))
    if both:
        raise InvalidRequestError(
            f"workload profile id(s) {', '.join(map(str, both))} both enabled and disabled"
        )


@dataclass(frozen=True)
class _GpuOutcome:
    status: GpuProfileStatus
    requested: list[int]
    enforced: list[int]


async def change_profiles(
    device: Device, change: ProfileChange, *, scope: str | None = None
) -> tuple[ProfileResult, PendingVerification | None]:
    """Disable, then enable, the given profiles on every GPU; read back; maybe ask for verification.

    With `scope`, each GPU's requested mask is read first and recorded as the scope's prior value.
    """
    validate(change)
    gpus = device.discovery.gpus
    capable = [g for g in gpus if g.wpps_uri]
    if not capable:
        what = "workload power profiles"
        error = unsupported_message(device.discovery, what)
        unsupported = tuple(GpuProfileStatus(str(g.index), False, (), error) for g in gpus)
        return ProfileResult(False, error, unsupported), None
    on, off = to_mask(change.enable), to_mask(change.disable)
    outcomes = await gather_writes(*(_apply_gpu(device, g, on, off, scope) for g in capable))
    statuses: list[GpuProfileStatus] = [o.status for o in outcomes]
    statuses += [
        GpuProfileStatus(str(g.index), False, (), unsupported_message(device.discovery, "WPPS on this GPU"))
        for g in gpus
        if not g.wpps_uri
    ]
    statuses.sort(key=lambda s: int(s.gpu_id))
    failed = [s.message for s in statuses if not s.ok]
    result = ProfileResult(ok=not failed, error=summarize(failed), gpus=tuple(statuses))
    if not change.verify or not (on or off):
        return result, None
    pending = PendingVerification(
        verification_id=uuid.uuid4().hex,
        check_after_seconds=device.settings.verify_after,
        payload={
            "kind": VERIFY_KIND,
            "gpus": [
                {
                    "key": g.key,
                    "gpu_id": g.index,
                    "uri": g.wpps_uri,
                    "on": list(change.enable),
                    "off": list(change.disable),
                }
                for g, o in zip(capable, outcomes, strict=True)
                if o.status.ok
            ],
        },
    )
    return _with_verification(result, pending.verification_id), pending


async def restore_profiles(device: Device, scope: str) -> ProfileResult | None:
    """Put back each GPU's requested mask recorded in `scope`, then forget the scope's masks."""
    priors = device.state.profile_priors(scope)
    if not priors:
        return None
    by_key = {g.key: g for g in device.discovery.gpus if g.wpps_uri}
    jobs = [_restore_gpu(device, by_key[k], parse_mask(v)) for k, v in priors.items() if k in by_key]
    outcomes = await gather_writes(*jobs)
    statuses = sorted((o.status for o in outcomes), key=lambda s: int(s.gpu_id))
    failed = [s.message for s in statuses if not s.ok]
    if not failed:
        device.state.drop_profile_priors(scope)
    return ProfileResult(ok=not failed, error=summarize(failed), gpus=tuple(statuses))


async def verify_profiles(bmc: OpBmc, payload: Mapping[str, Any]) -> VerificationResult:
    """Check that every GPU's requested mask shows the change; report what is enforced."""
    checks = ProfileChecks(_ids)
    for gpu in payload.get("gpus") or ():
        label = f"GPU {gpu.get('gpu_id')}"
        try:
            doc = await bmc.get(str(gpu["uri"]))
        except DeviceControllerError as exc:
            checks.not_yet(label, str(exc))
            continue
        requested = set(to_ids(parse_mask(doc.get("RequestedProfileMask"))))
        enforced = set(to_ids(parse_mask(doc.get("EnforcedProfileMask"))))
        on, off = set(gpu.get("on") or ()), set(gpu.get("off") or ())
        checks.observe(label, on, off, requested, enforced)
    return checks.result()


async def _apply_gpu(device: Device, gpu: Component, on: int, off: int, scope: str | None) -> _GpuOutcome:
    bmc = device.bmc
    label = f"GPU {gpu.index}"
    try:
        before = await bmc.get(gpu.wpps_uri)  # the prior, and the actions it lists (`listed_action`)
        if scope is not None:
            device.state.record_profile_prior(
                scope, gpu.key, format_mask(parse_mask(before.get("RequestedProfileMask")))
            )
        notes = await _change(bmc, gpu, before, on, off)
        return await _read_back(device, gpu, on, off, notes)
    except DeviceControllerError as exc:
        return _GpuOutcome(GpuProfileStatus(str(gpu.index), False, (), f"{label}: {exc}"), [], [])


async def _restore_gpu(device: Device, gpu: Component, prior: int) -> _GpuOutcome:
    label = f"GPU {gpu.index}"
    try:
        doc = await device.bmc.get(gpu.wpps_uri)
        current = parse_mask(doc.get("RequestedProfileMask"))
        off, on = current & ~prior, prior & ~current
        if not (on or off):
            enforced = to_ids(parse_mask(doc.get("EnforcedProfileMask")))
            device.state.set_profiles(gpu.key, to_ids(current), enforced)
            return _GpuOutcome(
                GpuProfileStatus(str(gpu.index), True, tuple(enforced)), to_ids(current), enforced
            )
        notes = await _change(device.bmc, gpu, doc, on, off)
        return await _read_back(device, gpu, on, off, notes)
    except DeviceControllerError as exc:
        return _GpuOutcome(GpuProfileStatus(str(gpu.index), False, (), f"{label}: {exc}"), [], [])


async def _change(bmc: OpBmc, gpu: Component, doc: Document, on: int, off: int) -> list[str]:
    """Disable `off`, then enable `on`, each through the target `doc` (the resource as just read)
    lists; returns notes on writes a read-back settled."""
    targets = {action: listed_action(doc, action) for action, mask in ((DISABLE, off), (ENABLE, on)) if mask}
    notes = []
    if off:
        notes.append(await _action(bmc, gpu, targets[DISABLE], off, lambda requested: not requested & off))
    if on:
        notes.append(await _action(bmc, gpu, targets[ENABLE], on, lambda requested: not on & ~requested))
    return [n for n in notes if n]


def listed_action(doc: Document, action: str) -> str:
    """The target the WPPS resource lists for `action` (`Actions` → `#<action>` → `target`, a path
    on this BMC): the only URI its POST may go to.

    Raises:
        PlatformUnsupportedError: the resource lists no such action (nothing is sent).
    """
    actions = doc.get("Actions")
    entry = actions.get(f"#{action}") if isinstance(actions, Mapping) else None
    target = entry.get("target") if isinstance(entry, Mapping) else None
    if not isinstance(target, str) or not target.startswith("/redfish/v1/"):
        raise PlatformUnsupportedError(
            f"{doc.path.rstrip('/')} lists no {action} action with a target on this BMC; nothing written"
        )
    return target


async def _action(bmc: OpBmc, gpu: Component, target: str, mask: int, done: Callable[[int], bool]) -> str:
    """POST one WPPS action to its listed `target`. Its answer lost (a gateway's 502/503/504, no
    reply after sending): the requested mask is read back before anything else; `done` with it is a
    note, else the error says whether it landed is unknown (docs/redfish.md, "Writes through
    gateways")."""
    try:
        await bmc.post(target, {"ProfileMask": format_mask(mask)}, component=gpu.label)
        return ""
    except ANSWER_LOST as exc:
        if not may_have_landed(exc):
            raise
        try:
            requested = parse_mask((await bmc.get(gpu.wpps_uri)).get("RequestedProfileMask"))
        except DeviceControllerError as read_failed:
            unread(exc, read_failed)
            annotate(exc, f"; the read-back failed too ({read_failed}): whether it landed is unknown")
            raise exc from read_failed
        if done(requested):
            return f"GPU {gpu.index}: {landed(exc, None)}"
        shown = f"requested {_ids(to_ids(requested))}"
        not_landed(exc, None, shown, again=False)
        annotate(exc, f"; read back: {shown}; whether it lands is unknown")
        raise


async def _read_back(device: Device, gpu: Component, on: int, off: int, notes: list[str]) -> _GpuOutcome:
    doc = await device.bmc.get(gpu.wpps_uri)
    requested = parse_mask(doc.get("RequestedProfileMask"))
    enforced = parse_mask(doc.get("EnforcedProfileMask"))
    device.state.set_profiles(gpu.key, to_ids(requested), to_ids(enforced))
    label = f"GPU {gpu.index}"
    if on & ~requested or off & requested:
        notes.append(f"{label}: the BMC's requested profiles are {_ids(to_ids(requested))} after the change")
    elif on & ~enforced:
        notes.append(
            f"{label}: requested {_ids(to_ids(requested))}, enforced {_ids(to_ids(enforced))} "
            "(the firmware arbitrates conflicting profiles)"
        )
    ok = not (on & ~requested or off & requested)
    status = GpuProfileStatus(str(gpu.index), ok, tuple(to_ids(enforced)), "; ".join(notes))
    return _GpuOutcome(status, to_ids(requested), to_ids(enforced))


def _with_verification(result: ProfileResult, verification_id: str) -> ProfileResult:
    return ProfileResult(result.ok, result.error, result.gpus, verification_id)


def _ids(ids: Iterable[int] | Sequence[int]) -> str:
    items = sorted(ids)
    return ", ".join(map(str, items)) if items else "none"
