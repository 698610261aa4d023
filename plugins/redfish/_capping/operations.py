"""Policy request kinds on top of a platform: allocations, topology policy, GPU policies.

Policy semantics (dps.md §5, `plugins.base._policy`): element watts are node totals split evenly
across the devices of that type (the node cap across processor modules where discovery proved
they cover the node), per-GPU policies override a GPU's share, percentages resolve against the
device maximum, and a value outside a component's limits is rejected for that component only.

"Restore" means what was there before: the first change a scope (`topology`, `rg:<group>`) makes
to a component records its prior value in the device state; deactivating the scope puts the prior
values back and forgets them (topology deactivation applies the spec's idle policy instead where
one is given).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from plugins.base import (
    DeviceControllerError,
    ElementType,
    GpuPoliciesChange,
    GpuPolicy,
    Policy,
    PolicyAction,
    PolicyChange,
    SystemSpec,
    element_share,
    gather_writes,
    gpu_targets,
    plain_init,
)
from plugins.redfish._capping.bounds import Bounds
from plugins.redfish._capping.caps import CapChange, restore_cap, set_cap, stands_in
from plugins.redfish._capping.priors import corrected, discovered_read, read_back_for
from plugins.redfish._client.readbacks import Priors, priors_from_read_backs
from plugins.redfish._device.device import Device, invalidate
from plugins.redfish._discovery.layout import Component
from plugins.redfish._platforms import LimitReading, Prior, mechanism_for, unsupported_message
from plugins.redfish._wire.document import Document
from plugins.redfish._wire.errors import ResourceNotFoundError


@plain_init
@dataclass(frozen=True)
class Target:
    """One thing to do for one element: set `watts` on `component`, or report `error`."""

    element: ElementType
    component: Component | None
    watts: float | None
    error: str = ""
    #: the element total this target is part of (node/CPU/memory results report totals)
    total: float | None = None


@dataclass
class Applied:
    """What a batch of cap changes did, by element."""

    targets: list[Target]
    changes: dict[str, CapChange]


# ---- planning ---------------------------------------------------------------------------------


def plan(
    device: Device,
    policy: Policy | None,
    gpu_policies: Sequence[GpuPolicy] = (),
    *,
    elements: Iterable[ElementType] = tuple(ElementType),
) -> list[Target]:
    """Targets for a node policy plus GPU-specific policies (see the module docstring)."""
    disc, spec = device.discovery, device.spec
    wanted = set(elements)
    targets: list[Target] = []
    if ElementType.NODE in wanted:
        targets += _node_targets(device, policy)
    for element, comps in ((ElementType.CPU, disc.cpus), (ElementType.MEMORY, ())):
        if element not in wanted:
            continue
        share = element_share(spec, policy, element)
        if share is None:
            continue
        total = share.watts * max(len(comps), 1) if share.watts is not None else None
        capable = [c for c in comps if c.mechanism]
        if not capable:
            if element is ElementType.MEMORY:
                # NOTE: which Redfish resource carries a memory power limit is unpublished for the
                # NVIDIA platforms and absent from the DMTF mockups (redfish.md §1.2, §6).
                reason = "no Redfish memory power-limit resource is known for it"
                message = unsupported_message(disc, "memory power limits", reason)
            else:
                message = unsupported_message(disc, "CPU power limits", comps[0].reason if comps else "")
            targets.append(Target(element, None, share.watts, message, total))
        elif share.error:
            targets.append(Target(element, None, share.watts, share.error, total))
        else:
            targets += [Target(element, c, share.watts, total=total) for c in capable]
    if ElementType.GPU in wanted:
        targets += _gpu_targets(device, policy, gpu_policies)
    return targets


def _node_targets(device: Device, policy: Policy | None) -> list[Target]:
    disc = device.discovery
    share = element_share(_bmc_node_range(device), policy, ElementType.NODE)
    if share is None:
        return []
    if not disc.node:
        return [Target(ElementType.NODE, None, share.watts, unsupported_message(disc, "node power limit"))]
    if share.error or share.watts is None:
        return [Target(ElementType.NODE, None, share.watts, share.error or "node: no limit", share.watts)]
    per = share.watts / len(disc.node)
    # NOTE: several node components only where discovery proved that processor modules cover the
    # node together (`_platforms.nvidia_hgx`: GB300's Links.Contains, the DGX_GB200/GB300 DPS models)
    return [Target(ElementType.NODE, c, per, total=share.watts) for c in disc.node]


async def _read_node_ranges(device: Device) -> None:
    """Read the node components' limits the state has no reading of yet (their AllowableMin/Max
    make the node's range), when the model's range refused the node cap: a refusal names the
    range this BMC takes. A read that fails leaves the model's range."""
    if len(device.discovery.node) < 2:
        return
    for component in device.discovery.node:
        mech = mechanism_for(component)
        if mech is None or device.state.reading(component.key) is not None:
            continue
        try:
            reading = mech.parse(component, await device.bmc.get(component.limit_uri))
        except DeviceControllerError:
            return
        device.state.set_reading(component.key, reading)


def _bmc_node_range(device: Device) -> SystemSpec:
    """The spec with the node's range as the BMC last reported it (the sum of its node
    components' AllowableMin/Max, a GB200 tray's modules), when it reported one for each: the
    model's nominal range (1000..6667 W) is not what this BMC takes (2 x 2820 = 5640 W)."""
    # one node component: its write checks the BMC's range itself, naming the BMC's properties
    ranges = [device.state.reading_range(c.key) for c in device.discovery.node]
    if len(ranges) < 2 or any(r is None or r[0] is None or r[1] is None for r in ranges):
        return device.spec
    lo = sum(r[0] for r in ranges if r is not None and r[0] is not None)
    hi = sum(r[1] for r in ranges if r is not None and r[1] is not None)
    made = device.node_range
    if made is not None and made[0] is device.spec and made[1] == lo and made[2] == hi:
        return made[3]  # asked again in the same operation (the policy's check, then its targets)
    spec = replace(device.spec, node=replace(device.spec.node, min_watts=lo, max_watts=hi))
    device.node_range = (device.spec, lo, hi, spec)
    return spec


def _gpu_targets(device: Device, policy: Policy | None, gpu_policies: Sequence[GpuPolicy]) -> list[Target]:
    disc = device.discovery
    if not disc.gpus:
        share = policy is not None and policy.limit_for(ElementType.GPU) is not None
        if share and device.spec.gpu.count:
            msg = unsupported_message(disc, "GPU power limits", "the BMC shows no GPUs")
            return [Target(ElementType.GPU, None, None, msg)]
        if not gpu_policies:
            return []  # neither the spec nor the BMC has GPUs: a GPU share has nothing to apply to
    by_index = {c.index: c for c in disc.gpus}
    out: list[Target] = []
    for gpu_id, cap in sorted(gpu_targets(device.spec, policy, gpu_policies, by_index).items()):
        comp = by_index.get(gpu_id)
        error = cap.error
        if not error and comp is not None and not comp.mechanism:
            error = unsupported_message(disc, f"GPU {gpu_id} power limit", comp.reason)
        if comp is None:
            comp = Component(key=f"gpu/{gpu_id}", kind="gpu", index=gpu_id, name=f"GPU {gpu_id}")
        out.append(Target(ElementType.GPU, comp, cap.watts, error))
    return out


# ---- executing --------------------------------------------------------------------------------


async def apply_targets(device: Device, targets: list[Target], scope: str) -> Applied:
    """Set every target, as many at once as the BMC takes requests (its `concurrency`: the
    client's slots pace every call anyway); record priors and applied caps.

    NOTE: one worker per slot takes the targets in turn, rather than a task per target waiting for
    a slot: a target's pre-write read (a read-back or discovery's GET standing in for it, parsed)
    is chosen when its write is next, so an activation holds at most that many parsed documents,
    not one per target for its whole length (the fleet's peak memory), and no more tasks than
    can run. The choice sees the read-backs as they are then (one a failed call dropped meanwhile
    is not used: a fresh GET decides)."""
    runnable = [t for t in targets if not t.error and t.component is not None and t.watts is not None]
    state = device.state
    results: list[CapChange | None] = [None] * len(runnable)
    queue = iter(enumerate(runnable))

    async def worker() -> None:
        for i, target in queue:  # shared: each target is taken by one worker
            results[i] = await _set_target(device, target, scope, used)

    with priors_from_read_backs({}) as used:  # the workers' tasks take this context
        count = min(len(runnable), max(1, device.bmc.client.settings.concurrency))
        workers = [asyncio.ensure_future(worker()) for _ in range(count)]
    # one worker's unexpected error stops the others (no next cap taken) before it is raised
    await gather_writes(*workers)
    changes: dict[str, CapChange] = {}
    for result in results:
        assert result is not None  # every worker ended with the queue empty
        change = corrected(result, used)
        key = change.component.key
        changes[key] = change
        if change.before is not None and not state.has_prior(scope, key):  # the first change's, kept
            state.record_prior(scope, key, change.before.prior(uri=change.component.limit_uri))
        _keep_reading(device, change)
        if change.after is not None:
            after = change.after
            state.set_applied(key, after.watts if after.capped else None, change.requested, scope)
        if isinstance(change.error, ResourceNotFoundError):
            invalidate(device)
    return Applied(targets, changes)


async def _set_target(device: Device, t: Target, scope: str, used: Priors) -> CapChange:
    """One target's cap change, its pre-write read chosen now (`apply_targets`)."""
    comp = t.component
    assert comp is not None and t.watts is not None
    # NOTE: the stored reading stands in for the pre-write GET only once the scope's prior value
    # is recorded: the first change in a scope always reads what it will later restore, though
    # our own read-back of it, while valid, is that reading (docs/redfish.md).
    stored = device.state.reading(comp.key) if device.state.prior(scope, comp.key) is not None else None
    mech = mechanism_for(comp)
    if stored is not None and mech is not None and stands_in(device.bmc, mech, stored, t.watts):
        read_back = None  # no GET before the write, so nothing a read-back could answer
    else:
        read_back = read_back_for(device, comp, t.watts)
    known: tuple[Document, LimitReading] | None = None
    if read_back is not None:
        used.offered[comp.limit_uri] = read_back[0]
        if stored is None:  # then the GET it answers is made: parsed once, not again there
            used.parsed[comp.limit_uri] = read_back[1]
            known = read_back[1], read_back[2]
    # a node discovered by this operation: discovery's GET of the limit is the pre-write read
    discovered = discovered_read(device, comp, t.watts) if read_back is None and stored is None else None
    read = None
    if discovered is not None:
        read, known = discovered[0], discovered
    return await set_cap(
        device.bmc, comp, t.watts, stored=stored, read=read, bounds=_bounds(device, comp), known=known
    )


def _keep_reading(device: Device, change: CapChange) -> None:
    """Store the read-back for the next change's skipped GET (dropped when the change failed)."""
    if change.ok and change.after is not None:
        device.state.set_reading(change.component.key, change.after)
    else:
        device.state.set_reading(change.component.key, None)


def _bounds(device: Device, comp: Component) -> Bounds:
    """The spec's limits for a component (for BMCs that publish none), and the safety floor."""
    spec = device.spec
    floor = device.settings.min_cap_watts
    if comp.kind in ("gpu", "cpu"):
        part = spec.gpu if comp.kind == "gpu" else spec.cpu
        return Bounds(part.min_watts, part.max_watts, f"device spec's {comp.kind.upper()}", floor)
    count = max(len(device.discovery.node), 1)
    lo, hi = spec.node.min_watts, spec.node.max_watts
    return Bounds(
        lo / count if lo is not None else None,
        hi / count if hi is not None else None,
        "device spec's node",
        floor,
    )


async def restore_scope(device: Device, scope: str, keys: Iterable[str] | None = None) -> Applied:
    """Put back the prior values recorded in `scope` (all, or only `keys`) and forget them."""
    priors = device.state.priors(scope)
    if keys is not None:
        wanted = set(keys)
        priors = {k: v for k, v in priors.items() if k in wanted}
    targets: list[Target] = []
    jobs = []
    recorded_as: dict[str, str] = {}  # component key -> the key its prior was recorded under
    for key, prior in sorted(priors.items()):
        comp = device.discovery.by_key(key)
        if comp is not None and prior.uri and comp.limit_uri.rstrip("/") != prior.uri.rstrip("/"):
            comp = None  # the key now names another resource: never restore a value onto it
        if comp is None and prior.uri:
            # NOTE: a later discovery may place the same limit under another key (a processor
            # module's CPU limit, once taken for a node share, is now that CPU's cap): the prior
            # goes back to the resource it was read from
            comp = next(
                (
                    c
                    for c in device.discovery.components()
                    if c.mechanism and c.limit_uri.rstrip("/") == prior.uri.rstrip("/")
                ),
                None,
            )
            if comp is not None and (comp.key in priors or comp.key in recorded_as):
                comp = None
        element = _element_of(key)
        if comp is None:
            device.state.drop_prior(scope, key)  # the BMC no longer has it: nothing to restore
            continue
        recorded_as[comp.key] = key
        targets.append(Target(element, comp, prior.watts, total=None))
        jobs.append(restore_cap(device.bmc, comp, prior))
    changes: dict[str, CapChange] = {}
    for change in await gather_writes(*jobs):
        key = change.component.key
        changes[key] = change
        _keep_reading(device, change)
        if change.ok:
            device.state.drop_prior(scope, recorded_as.get(key, key))
        if change.after is not None:
            after = change.after
            device.state.set_applied(key, after.watts if after.capped else None, None, scope)
        if isinstance(change.error, ResourceNotFoundError):
            invalidate(device)
    return Applied(targets, changes)


async def remove_gpu_caps(device: Device, scope: str, gpu_ids: Iterable[int]) -> Applied:
    """Remove GPU caps (`limit=None` with no share to fall back to): the value from before
    devicectl's change in `scope` where one is recorded, else no cap (the BMC's default). A GPU
    whose cap cannot be written fails with the reason; one already uncapped is reported so."""
    by_index = {c.index: c for c in device.discovery.gpus}
    priors = device.state.priors(scope)
    recorded: list[str] = []
    targets: list[Target] = []
    jobs = []
    for gpu_id in sorted(gpu_ids):
        comp = by_index.get(gpu_id)
        if comp is None:
            continue  # `gpu_targets` already reported the GPU as missing
        if comp.key in priors:
            recorded.append(comp.key)
            continue
        if not comp.mechanism:  # refused: this platform cannot write (so cannot remove) the cap
            message = unsupported_message(device.discovery, f"GPU {gpu_id} power limit (removing it)")
            targets.append(Target(ElementType.GPU, comp, None, message))
            continue
        targets.append(Target(ElementType.GPU, comp, None))
        jobs.append(restore_cap(device.bmc, comp, Prior(None, False), note="remove the cap (--gpu N=none)"))
    changes: dict[str, CapChange] = {}
    for change in await gather_writes(*jobs):
        key = change.component.key
        _keep_reading(device, change)
        if change.after is not None:
            device.state.set_applied(key, change.after.watts if change.after.capped else None, None, scope)
        if isinstance(change.error, ResourceNotFoundError):
            invalidate(device)
        if change.ok:
            done = "cap removed" if change.wrote else "no cap to remove"
            default = (
                f" ({change.after.watts:g} W)" if change.after and change.after.watts is not None else ""
            )
            change = replace(
                change, message=f"{change.component.label}: {done}; the BMC default is in force{default}"
            )
        changes[key] = change
    applied = Applied(targets, changes)
    if recorded:
        restored = await restore_scope(device, scope, recorded)
        applied.targets += restored.targets
        for key, change in restored.changes.items():
            if change.ok:
                back = _w_or_none(change.applied)
                message = (
                    f"{change.component.label}: cap removed; back to {back}, as before devicectl's change"
                )
                change = replace(change, message=message)
            applied.changes[key] = change
    return applied


def _w_or_none(watts: float | None) -> str:
    return f"{watts:g} W" if watts is not None else "no cap"


# ---- request kinds ----------------------------------------------------------------------------


async def apply_policy_change(
    device: Device,
    scope: str,
    change: PolicyChange | None,
    gpu_change: GpuPoliciesChange | None,
) -> tuple[Applied, Policy | None]:
    """Apply a node-policy change and/or GPU-policy change in one scope (one batch of writes)."""
    policy = change.policy if change is not None and change.action is PolicyAction.SET else None
    # GPUs without a GPU-specific policy take their share of the node policy (the one being set,
    # or, for a GPU-policy change alone, the policy currently in force)
    gpu_share_policy = policy
    if gpu_share_policy is None and gpu_change is not None:
        gpu_share_policy = gpu_change.current_policy
    gpu_specific: Sequence[GpuPolicy] = ()
    if gpu_change is not None and gpu_change.action is PolicyAction.SET:
        gpu_specific = gpu_change.policies
    targets: list[Target] = []
    share = element_share(_bmc_node_range(device), policy, ElementType.NODE)
    if share is not None and share.error:  # refused by the model's range: say the BMC's instead
        await _read_node_ranges(device)
    if policy is not None:
        targets += plan(device, policy, elements=(ElementType.NODE, ElementType.CPU, ElementType.MEMORY))
    if policy is not None or gpu_change is not None:
        targets += plan(device, gpu_share_policy, gpu_specific, elements=(ElementType.GPU,))
    applied = await apply_targets(device, targets, scope)
    # `--gpu N=none` on a GPU that gets no share: its cap goes, never silently nothing
    removed = {p.gpu_id for p in gpu_specific if p.limit is None}
    removed -= {
        t.component.index for t in targets if t.element is ElementType.GPU and t.component is not None
    }
    if removed:
        cleared = await remove_gpu_caps(device, scope, removed)
        applied.targets += cleared.targets
        applied.changes.update(cleared.changes)
    # restore what the change released: an UNSET policy, elements a new policy no longer limits
    # (the topology sends full desired state), or reset GPUs that got no share
    release: set[str] = set()
    if policy is not None:
        release |= {
            k
            for k in device.state.priors(scope)
            if _element_of(k) is not ElementType.GPU and policy.limit_for(_element_of(k)) is None
        }
    if change is not None and change.action is PolicyAction.UNSET:
        release |= {k for k in device.state.priors(scope) if _element_of(k) is not ElementType.GPU}
        if gpu_change is None:
            release |= {k for k in device.state.priors(scope) if _element_of(k) is ElementType.GPU}
    if gpu_change is not None and gpu_change.action is PolicyAction.UNSET:
        targeted = {t.component.key for t in targets if t.component is not None}
        release |= {
            k for k in device.state.priors(scope) if _element_of(k) is ElementType.GPU and k not in targeted
        }
    if release:
        restored = await restore_scope(device, scope, release)
        applied.targets += restored.targets
        applied.changes.update(restored.changes)
    if change is not None:
        device.state.set_policy(scope, policy.name if policy is not None else None)
    return applied, policy


def _element_of(key: str) -> ElementType:
    kind = key.split("/", 1)[0]
    return {
        "gpu": ElementType.GPU,
        "cpu": ElementType.CPU,
        "memory": ElementType.MEMORY,
    }.get(kind, ElementType.NODE)
