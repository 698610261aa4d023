"""An in-memory device plugin for controller tests.

Devices are simulated entirely in the state JSON the controller passes in and persists. Behaviour
is steered per device by the model JSON: `delay` (seconds per operation), `fail`
("unreachable", "rejected", "crash"), `gpus` (count). Calls are recorded in `MemoryPlugin.calls`
(class level, for assertions about ordering and concurrency) — instrumentation, not device state.

State schema (`load_state`), so tests exercise the controller's check-and-migrate step:
version 2 (current, also assumed when `version` is absent) keeps GPU caps in `gpus`
({"<gpu id>": watts | null}) and their values before the first change in `prior`, the node cap in
`node`, the resource group in `resource_group` and enabled profile ids in `profiles`. Version 1
kept the GPU caps under `caps`; it is migrated by renaming that key.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from plugins.base import (
    Allocation,
    AllocationResult,
    Attribute,
    ComponentMetrics,
    ContainerReservation,
    Device,
    DeviceContext,
    DeviceGroup,
    DevicePlugin,
    DeviceRejectedError,
    DeviceTarget,
    DeviceUnreachableError,
    ElementType,
    Empty,
    FingerprintResponse,
    GpuMetricsQuery,
    GpuMetricsResult,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuProfileStatus,
    GpuResult,
    GpuUsage,
    InvalidRequestError,
    NodeMetrics,
    Outcome,
    PendingVerification,
    Ping,
    PingResult,
    PluginInfo,
    PolicyAction,
    PolicyChange,
    ProfileChange,
    ProfileResult,
    RawMetricsResult,
    StdMetricsResult,
    SystemSpec,
    VerificationResult,
    element_share,
    gpu_targets,
)


class MemoryPlugin(DevicePlugin):
    info = PluginInfo(name="memory", version="1.0", vendor="tests")
    calls: ClassVar[list[tuple[str, str, str, float, float]]] = []  # (device, request_id, op, start, end)
    running: ClassVar[int] = 0
    max_running: ClassVar[int] = 0
    started: ClassVar[int] = 0
    closed: ClassVar[int] = 0
    #: an Event not yet set holds every device call until it is: a device that has not answered
    hold: ClassVar[asyncio.Event | None] = None

    state_version = 2

    def load_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(state)
        version = data.get("version", self.state_version)
        if version not in (1, 2) or isinstance(version, bool):
            raise InvalidRequestError(f"memory state: version: {version!r} is not 1 or 2")
        if version == 1:
            data["gpus"] = data.pop("caps", {})
        for key in ("gpus", "prior"):
            caps = data.get(key, {})
            if not isinstance(caps, Mapping):
                raise InvalidRequestError(f"memory state: {key}: expected an object")
            for gpu, watts in caps.items():
                if not gpu.isdigit() or not (watts is None or _watts(watts)):
                    raise InvalidRequestError(f"memory state: {key}.{gpu[:40]}: expected a GPU id and watts")
        if "node" in data and not _watts(data["node"]):
            raise InvalidRequestError("memory state: node: expected watts")
        profiles = data.get("profiles", [])
        if not isinstance(profiles, list) or not all(type(p) is int for p in profiles):
            raise InvalidRequestError("memory state: profiles: expected a list of profile ids")
        data["version"] = self.state_version
        return data

    def check_model(self, model: Mapping[str, Any]) -> None:
        delay = model.get("delay", 0)
        if not _watts(delay):  # same rule: a finite number >= 0
            raise InvalidRequestError(f"device model: delay: expected seconds >= 0, got {delay!r:.40}")
        if model.get("fail") not in (None, "unreachable", "rejected", "crash"):
            raise InvalidRequestError(f"device model: fail: unknown failure {model['fail']!r:.40}")
        try:
            SystemSpec.from_model(model)
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidRequestError(f"device model: {str(exc)[:160]}") from None

    @classmethod
    def reset(cls) -> None:
        cls.calls = []
        cls.running = cls.max_running = 0
        cls.hold = None

    async def start(self) -> None:
        type(self).started += 1

    async def close(self) -> None:
        type(self).closed += 1

    async def _work(self, ctx: DeviceContext, op: str) -> None:
        cls = type(self)
        start = time.monotonic()
        cls.running += 1
        cls.max_running = max(cls.max_running, cls.running)
        try:
            if cls.hold is not None:
                await cls.hold.wait()
            delay = float(ctx.model.get("delay", 0))
            if delay:
                await asyncio.sleep(delay)
            fail = ctx.model.get("fail")
            if fail == "unreachable":
                raise DeviceUnreachableError(f"{ctx.device_id}: connection refused")
            if fail == "rejected":
                raise DeviceRejectedError(f"{ctx.device_id}: device said no")
            if fail == "crash":
                raise RuntimeError("boom")
        finally:
            cls.running -= 1
            cls.calls.append((ctx.device_id, ctx.request_id, op, start, time.monotonic()))

    def _spec(self, ctx: DeviceContext) -> SystemSpec:
        spec = SystemSpec.from_model(ctx.model)
        if spec.gpu.count == 0:
            spec = SystemSpec.from_model({"Model": "DGX_GB200", **ctx.model})
        return spec

    def _apply_gpus(
        self, ctx: DeviceContext, state: dict[str, Any], change: GpuPoliciesChange
    ) -> GpuPoliciesResult:
        spec = self._spec(ctx)
        caps: dict[str, Any] = state.setdefault("gpus", {})
        prior: dict[str, Any] = state.setdefault("prior", {})
        results = []
        if change.action is PolicyAction.UNSET:
            for key in list(caps):
                caps[key] = prior.pop(key, None)
                results.append(GpuResult(int(key), True, caps[key] or 0.0))
            return GpuPoliciesResult(change.resource_group, tuple(results))
        for gpu, target in sorted(gpu_targets(spec, change.current_policy, change.policies).items()):
            if not target.ok:
                results.append(
                    GpuResult(gpu, False, float(caps.get(str(gpu)) or 0), target.watts, target.error)
                )
                continue
            prior.setdefault(str(gpu), caps.get(str(gpu)))
            caps[str(gpu)] = target.watts
            results.append(GpuResult(gpu, True, float(target.watts or 0), target.watts))
        return GpuPoliciesResult(change.resource_group, tuple(results))

    async def update_gpu_policies(
        self, ctx: DeviceContext, req: GpuPoliciesChange
    ) -> Outcome[GpuPoliciesResult]:
        await self._work(ctx, "gpu_policies")
        state = dict(ctx.state)
        result = self._apply_gpus(ctx, state, req)
        return Outcome(result, state=state, reached_at=datetime.now(UTC))

    async def _allocation(self, ctx: DeviceContext, req: Allocation, op: str) -> Outcome[AllocationResult]:
        await self._work(ctx, op)
        state = dict(ctx.state)
        gpus = self._apply_gpus(ctx, state, req.gpu_policies) if req.gpu_policies else None
        node_watts = 0.0
        if req.policy and req.policy.action is PolicyAction.SET:
            share = element_share(self._spec(ctx), req.policy.policy, ElementType.NODE)
            node_watts = share.watts or 0.0 if share else 0.0
            state["node"] = node_watts
        elif req.policy:
            state.pop("node", None)
        state["resource_group"] = req.resource_group if op != "deactivate" else None
        return Outcome(
            AllocationResult(
                ok=True, resource_group=req.resource_group, power_cap_watts=node_watts, gpu_policies=gpus
            ),
            state=state,
        )

    async def activate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "activate")

    async def update_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "update")

    async def deactivate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "deactivate")

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, Allocation("", policy=req), "set_policy")

    async def unset_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, Allocation("", policy=req), "unset_policy")

    async def _profiles(self, ctx: DeviceContext, req: ProfileChange, op: str) -> Outcome[ProfileResult]:
        await self._work(ctx, op)
        state = dict(ctx.state)
        enabled = set(state.get("profiles", [])) | set(req.enable)
        enabled -= set(req.disable)
        state["profiles"] = sorted(enabled)
        gpus = tuple(
            GpuProfileStatus(str(i), True, tuple(sorted(enabled))) for i in range(self._spec(ctx).gpu.count)
        )
        verification = (
            PendingVerification("v-" + ctx.request_id, 0.05, {"expect": sorted(enabled)})
            if req.verify
            else None
        )
        return Outcome(
            ProfileResult(
                True, gpus=gpus, verification_id=verification.verification_id if verification else ""
            ),
            state=state,
            verification=verification,
        )

    async def enable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "enable_profiles")

    async def disable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "disable_profiles")

    async def update_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "update_profiles")

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        ok = sorted(ctx.state.get("profiles", [])) == list(pending.payload.get("expect", []))
        return VerificationResult(
            True, "verified" if ok else "mismatch", f"profiles {ctx.state.get('profiles')}"
        )

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        await self._work(ctx, "ping")
        return Outcome(PingResult(True), reached_at=datetime.now(UTC))

    async def gpu_metrics(self, ctx: DeviceContext, req: GpuMetricsQuery) -> Outcome[GpuMetricsResult]:
        await self._work(ctx, "gpu_metrics")
        ids = req.gpu_ids or tuple(range(self._spec(ctx).gpu.count))
        return Outcome(GpuMetricsResult(True, metrics=tuple(GpuUsage(i, 100.0 + i) for i in ids)))

    async def raw_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[RawMetricsResult]:
        await self._work(ctx, "raw_metrics")
        return Outcome(RawMetricsResult(True, documents={"state": dict(ctx.state)}))

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        await self._work(ctx, "std_metrics")
        gpus = tuple(ComponentMetrics(str(i), 100.0, 1000.0) for i in range(self._spec(ctx).gpu.count))
        return Outcome(StdMetricsResult(True, metrics=NodeMetrics(ctx.device_id, 400.0, gpus=gpus)))

    async def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncIterator[FingerprintResponse]:  # type: ignore[override]
        devices = tuple(Device(t.device_id, True) for t in targets)
        yield FingerprintResponse(
            (DeviceGroup("tests", "node", "memory", devices, {"kind": Attribute("memory")}),)
        )

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        return ContainerReservation(envs={"MEMORY_DEVICES": ",".join(device_ids)})


def _watts(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value >= 0
