"""A device plugin that does nothing: every request kind succeeds at once (benchmarks only).

It isolates the controller's own cost (gRPC, validation, journal, dispatch, completion, outbox,
delivery) from any device. A device whose model JSON carries `delay` (seconds) holds each request
that long first; the recovery benchmark uses it to keep journaled requests unfinished until the
controller is killed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from plugins.base import (
    Allocation,
    AllocationResult,
    DeviceContext,
    DevicePlugin,
    Empty,
    GpuMetricsQuery,
    GpuMetricsResult,
    GpuPoliciesChange,
    GpuPoliciesResult,
    HealthCheck,
    HealthQuery,
    HealthResult,
    Outcome,
    Ping,
    PingResult,
    PluginInfo,
    PolicyChange,
    ProfileChange,
    ProfileResult,
    RawMetricsResult,
    StdMetricsResult,
)


class NoopPlugin(DevicePlugin):
    """Answers every request kind with success and leaves the device state unchanged."""

    info = PluginInfo(name="bench-noop", version="1.0", vendor="devicectl bench")

    @staticmethod
    async def _hold(ctx: DeviceContext) -> None:
        delay = float(ctx.model.get("delay", 0) or 0)
        if delay > 0:
            await asyncio.sleep(delay)

    async def _allocation(self, ctx: DeviceContext, resource_group: str) -> Outcome[AllocationResult]:
        await self._hold(ctx)
        return Outcome(AllocationResult(ok=True, resource_group=resource_group))

    async def activate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req.resource_group)

    async def update_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req.resource_group)

    async def deactivate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req.resource_group)

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, "")

    async def unset_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, "")

    async def update_gpu_policies(
        self, ctx: DeviceContext, req: GpuPoliciesChange
    ) -> Outcome[GpuPoliciesResult]:
        await self._hold(ctx)
        return Outcome(GpuPoliciesResult(req.resource_group))

    async def enable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        await self._hold(ctx)
        return Outcome(ProfileResult(True))

    async def disable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        await self._hold(ctx)
        return Outcome(ProfileResult(True))

    async def update_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        await self._hold(ctx)
        return Outcome(ProfileResult(True))

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        await self._hold(ctx)
        return Outcome(PingResult(True), reached_at=datetime.now(UTC))

    async def gpu_metrics(self, ctx: DeviceContext, req: GpuMetricsQuery) -> Outcome[GpuMetricsResult]:
        await self._hold(ctx)
        return Outcome(GpuMetricsResult(True))

    async def raw_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[RawMetricsResult]:
        await self._hold(ctx)
        return Outcome(RawMetricsResult(True))

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        await self._hold(ctx)
        return Outcome(StdMetricsResult(True))

    async def bmc_health(self, ctx: DeviceContext, req: HealthQuery) -> Outcome[HealthResult]:
        await self._hold(ctx)
        return Outcome(HealthResult((HealthCheck("reachability", "pass"),)))
