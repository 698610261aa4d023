"""`RedfishPlugin`: the request kinds, on top of discovery, cap mechanisms and the BMC pool."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, TypeVar

from plugins.base import (
    CATALOGUE,
    Allocation,
    AllocationResult,
    DeviceContext,
    DeviceControllerError,
    DevicePlugin,
    DeviceTarget,
    ElementType,
    Empty,
    EntityModification,
    EntityModificationResult,
    FingerprintResponse,
    GpuMetricsQuery,
    GpuMetricsResult,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuUsage,
    HealthQuery,
    HealthResult,
    InvalidRequestError,
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
    StatsResponse,
    StdMetricsResult,
    VerificationResult,
)
from plugins.redfish import (
    _plugin_config,
)
from plugins.redfish._capping import operations as _operations
from plugins.redfish._capping import profiles as _profiles
from plugins.redfish._capping import results as _results
from plugins.redfish._capping.operations import apply_policy_change, restore_scope
from plugins.redfish._client.pool import BmcPool
from plugins.redfish._config import RedfishSettings, config_schema
from plugins.redfish._device import entity as _entity
from plugins.redfish._device import schema as _schema
from plugins.redfish._device.device import Device, connect, prepare, record_session
from plugins.redfish._device.op_bmc import OpBmc
from plugins.redfish._device.state import TOPOLOGY, gpu_scope, rg_scope
from plugins.redfish._discovery.evidence import cap_plan
from plugins.redfish._discovery.layout import AUTO, GENERIC_MODELS, MECH_CONTROL, MODEL_PLATFORMS
from plugins.redfish._readings import metrics as _metrics
from plugins.redfish._readings import streams as _streams
from plugins.redfish._verify import verify as _verify
from plugins.redfish._verify import verify_writes as _verify_writes
from plugins.redfish._wire.errors import PlatformUnsupportedError

log = logging.getLogger(__name__)
R = TypeVar("R")

__version__ = "1.0.0"


class RedfishPlugin(DevicePlugin):
    """Power control of server nodes through their BMCs over Redfish.

    Every cap PATCH and action POST goes through `OpBmc._write` (receipts, dry run).

    One instance per process serves every Redfish device. It keeps no device state: discovery,
    prior values, applied caps and profile masks travel in the device state JSON. Login sessions
    and connections are process caches (one Redfish session and one concurrency limit per BMC),
    released by `forget()` and `close()`.

    Args:
        settings: plugin-wide defaults (per-device inventory `options` override them).
    """

    supports_dry_run = True
    warm_up = True  # a login, its session sweep and discovery: read once at the controller's start
    info = PluginInfo(
        name="redfish",
        version=__version__,
        vendor="devicectl",
        description="BMC power limits over Redfish: NVIDIA EnvironmentMetrics (GB200/GB300/B200EM/B300EM), "
        "DMTF Controls and legacy Chassis Power; WPPS; metrics",
    )

    def __init__(self, settings: RedfishSettings | None = None) -> None:
        self.settings = settings or RedfishSettings()
        self.pool = BmcPool(self.settings)
        #: BMCs from the plugin config, for hosts whose streams name no devices (a Nomad client)
        self._configured: tuple[DeviceTarget, ...] = ()
        self._started = False

    def plugin_config_schema(self) -> Mapping[str, Any]:
        """Plugin-wide BMC settings and the BMCs a Nomad client gets (`plugins.redfish._plugin_config`);
        per-device options stay in `config_schema()` (the inventory's `options`)."""
        return _plugin_config.SCHEMA

    async def set_config(self, config: Mapping[str, Any]) -> None:
        """Config decoded with that schema (defaults filled, nulls dropped, unknown keys refused)."""
        settings = _plugin_config.settings_from(config, self.settings)
        self._configured = _plugin_config.targets_from(config, settings)
        if settings != self.settings:
            if self._started:  # the pool holds the old settings: a fresh one for the new
                await self.pool.close()
            self.settings, self.pool = settings, BmcPool(settings, client_id=self.pool.client_id)
            if self._started:
                await self.pool.start()

    state_version = _schema.STATE_VERSION

    def set_client_id(self, client_id: str) -> None:
        """The controller's instance id: our Redfish sessions carry it (`_client.client`)."""
        if client_id:
            self.pool.set_client_id(client_id)

    def config_schema(self) -> Mapping[str, Any]:
        """The per-device `options` (see `plugins.redfish._config`)."""
        return config_schema()

    def known_models(self) -> tuple[str, ...]:
        """The DPS models (platform table and spec catalogue), `auto` and the generic DMTF names."""
        return (*MODEL_PLATFORMS, *CATALOGUE, AUTO, *GENERIC_MODELS)

    def load_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Check the state JSON against the plugin's schema and migrate older versions."""
        return _schema.load_state(state)

    def check_model(self, model: Mapping[str, Any]) -> None:
        """Check the device model JSON fields the plugin reads."""
        _schema.check_model(model)

    def cap_plan(self, state: Mapping[str, Any]) -> list[str]:
        """Which resource carries each cap and why, from a device state (`inventory check --login`)."""
        return cap_plan(state)

    async def start(self) -> None:
        """Open the shared HTTP session. Never touches any BMC (limits survive controller restarts)."""
        await self.pool.start()
        self._started = True

    async def close(self) -> None:
        """Delete every Redfish session and close the shared HTTP session."""
        await self.pool.close()

    async def forget(self, device_id: str) -> None:
        """Drop a device; its BMC's Redfish session is deleted if no other device uses it."""
        await self.pool.forget(device_id)

    async def modify_entity(
        self, ctx: DeviceContext, req: EntityModification
    ) -> Outcome[EntityModificationResult]:
        """Two-phase entity modification (the decision table: `plugins.base.entity`)."""
        return await _entity.modify_entity(self, ctx, req)

    # ---- allocations and policies ---------------------------------------------------------------

    async def activate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        """Resource group activation: node policy, GPU policies and workload profiles."""
        return await self._allocation(ctx, req)

    async def update_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        """Resource group update (same as activation; prior values already recorded are kept)."""
        return await self._allocation(ctx, req)

    async def deactivate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        """Resource group deactivation: restore what the group's activation found."""
        device = await prepare(self.pool, self.settings, ctx)
        scope = rg_scope(req.resource_group)
        applied = await restore_scope(device, scope)
        profiles = await _profiles.restore_profiles(device, scope)
        device.state.set_policy(scope, None)
        result = _results.allocation_result(applied, resource_group=req.resource_group, device=device)
        result = _with_profiles(result, profiles)
        return self._outcome(device, result)

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        """Topology activation: apply the node policy (recording prior values)."""
        if req.action is PolicyAction.UNSET:
            return await self.unset_policy(ctx, req)
        if req.policy is None:
            raise InvalidRequestError("topology activation without a policy")
        device = await prepare(self.pool, self.settings, ctx)
        applied, policy = await apply_policy_change(device, TOPOLOGY, req, None)
        return self._outcome(device, _results.allocation_result(applied, policy=policy, device=device))

    async def unset_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        """Topology deactivation: the spec's idle policy where given, else restore prior values; with
        `retain_limits` nothing is written (the prior values stay recorded for a later restore)."""
        device = await prepare(self.pool, self.settings, ctx)
        if req.retain_limits:
            device.state.set_policy(TOPOLOGY, None)
            retained = _operations.Applied([], {})
            return self._outcome(device, _results.allocation_result(retained, policy=None, device=device))
        idle = device.spec.idle_policy
        if idle is not None:
            targets = _operations.plan(device, idle)
            applied = await _operations.apply_targets(device, targets, TOPOLOGY)
            covered = {t.component.key for t in targets if t.component is not None}
            rest = [k for k in device.state.priors(TOPOLOGY) if k not in covered]
            if rest:
                restored = await restore_scope(device, TOPOLOGY, rest)
                applied.targets += restored.targets
                applied.changes.update(restored.changes)
            for key in covered:
                change = applied.changes.get(key)
                if change is not None and change.ok:
                    device.state.drop_prior(TOPOLOGY, key)
            policy = idle
        else:
            applied = await restore_scope(device, TOPOLOGY)
            policy = None
        device.state.set_policy(TOPOLOGY, None)
        return self._outcome(device, _results.allocation_result(applied, policy=policy, device=device))

    async def update_gpu_policies(
        self, ctx: DeviceContext, req: GpuPoliciesChange
    ) -> Outcome[GpuPoliciesResult]:
        """GPU-specific caps (or their reset), each GPU answered with the cap the BMC reports."""
        device = await prepare(self.pool, self.settings, ctx)
        applied, _ = await apply_policy_change(device, gpu_scope(req.resource_group), None, req)
        gpu_targets = [t for t in applied.targets if t.element is ElementType.GPU]
        results = _results.gpu_results(gpu_targets, applied.changes)
        errors = [t.error for t in gpu_targets if t.component is None]
        if errors and not results:
            raise PlatformUnsupportedError(errors[0])
        return self._outcome(device, GpuPoliciesResult(req.resource_group, tuple(results)))

    # ---- workload profiles ----------------------------------------------------------------------

    async def enable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        """Enable workload power profiles on every GPU (ids are out-of-band ids, 3..258)."""
        return await self._profiles(ctx, req)

    async def disable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        """Disable workload power profiles (ids given as `enable` are read as ids to disable)."""
        if req.enable and not req.disable:
            req = ProfileChange(enable=(), disable=req.enable, verify=req.verify)
        return await self._profiles(ctx, req)

    async def update_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        """Disable `disable`, then enable `enable`, in one request."""
        return await self._profiles(ctx, req)

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        """The follow-up check of a workload-profile change."""
        if pending.payload.get("kind") != _profiles.VERIFY_KIND:
            return VerificationResult(True, "failed", f"unknown verification {pending.payload.get('kind')!r}")
        client, _ = await connect(self.pool, self.settings, ctx)
        return await _profiles.verify_profiles(OpBmc(client, ctx.deadline), pending.payload)

    async def bmc_health(self, ctx: DeviceContext, req: HealthQuery) -> Outcome[HealthResult]:
        """Readiness for power management (`plugins.redfish._verify.verify`), and the write cycle
        (`plugins.redfish._verify.verify_writes`) unless `skip_writes`."""
        problem = req.check()
        if problem:
            raise InvalidRequestError(problem)
        if req.restore:  # an interrupted write cycle's journal: put it back, nothing else
            prepared = await prepare(self.pool, self.settings, ctx)
            restored = await _verify_writes.restore_priors(prepared, req.restore)
            return self._outcome(prepared, HealthResult(tuple(restored)))
        if req.apply and not req.skip_writes:  # the journaled step: the read-only checks ran first
            prepared = await prepare(self.pool, self.settings, ctx)
            cycled = await _verify_writes.write_cycle(prepared, req)
            return self._outcome(prepared, HealthResult(tuple(cycled)))
        checks, device = await _verify.read_only(self.pool, self.settings, ctx, req)
        if device is None:
            return Outcome(HealthResult(tuple(checks)))
        if not req.skip_writes:
            checks += await _verify_writes.write_cycle(device, req)
        return self._outcome(device, HealthResult(tuple(checks)))

    # ---- reachability and metrics ---------------------------------------------------------------

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        """GET the service root (no login needed), retried `retry_count` times."""
        client, _ = await connect(self.pool, self.settings, ctx)
        bmc = OpBmc(client, ctx.deadline)
        try:
            await bmc.ping(attempts=max(1, req.retry_count + 1))
        except DeviceControllerError as exc:
            # an HTTP answer (a 503) reached the BMC: only a transport failure is a reach error
            unreached = bmc.reach_error or ("" if bmc.reached_at is not None else str(exc))
            return Outcome(PingResult(False, str(exc)), reached_at=bmc.reached_at, reach_error=unreached)
        return Outcome(PingResult(True), reached_at=bmc.reached_at)

    async def gpu_metrics(self, ctx: DeviceContext, req: GpuMetricsQuery) -> Outcome[GpuMetricsResult]:
        """Per-GPU power readings (all GPUs when `gpu_ids` is empty)."""
        device = await prepare(self.pool, self.settings, ctx)
        gpus = device.discovery.gpus
        if not gpus:
            return self._outcome(device, GpuMetricsResult(False, "the BMC shows no GPUs on this node"))
        known = {g.index: g for g in gpus}
        wanted = list(req.gpu_ids) or sorted(known)
        missing = [i for i in wanted if i not in known]
        if missing:
            ids = ", ".join(map(str, sorted(known)))
            error = f"no GPU {', '.join(map(str, missing))} on this node (GPUs: {ids})"
            return self._outcome(device, GpuMetricsResult(False, error))
        comps = [known[i] for i in wanted]
        readings = await _metrics.read(device.bmc, _metrics.sources(device.discovery, comps, node=False))
        usage = []
        absent: list[str] = []
        for comp in comps:
            if not comp.metrics_uri and comp.mechanism != MECH_CONTROL:
                absent.append(f"{comp.label} power")
                continue
            if not _metrics.was_read(comp, readings.documents):
                continue  # named by `failure_notes`
            found: list[str] = []
            metrics = _metrics.component_metrics(comp, readings.documents, found)
            if f"{comp.label} power" in found:
                absent.append(f"{comp.label} power")
                continue  # no reading: left out, never reported as 0 W
            usage.append(GpuUsage(comp.index, metrics.power_watts))
        notes = _metrics.failure_notes(device.discovery, comps, readings, node=False)
        errors = [*notes, _metrics.absent_message(absent)] if absent else notes
        # NOTE: power is all this answer carries: ok when at least one asked-for GPU has a reading;
        # every GPU without one is named (absent or unknown, with the reason), never reported as 0 W
        result = GpuMetricsResult(bool(usage), "; ".join(errors), tuple(usage))
        return self._outcome(device, result)

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        """Node power, and per-GPU/CPU power, energy, limits and temperature."""
        device = await prepare(self.pool, self.settings, ctx)
        disc = device.discovery
        uris = _metrics.sources(disc, disc.components(), node=True, limits=True)
        readings = await _metrics.read(device.bmc, uris)
        absent: list[str] = []
        metrics = _metrics.node_metrics(device.name, disc, readings, device.spec.memory.count, absent)
        # every cap read (the node's and its modules' too, which the metrics type cannot carry) is
        # the component's last reading in the state: what the drift check compares and what
        # `devicectl devices limits` shows as enforced
        for key, reading in _metrics.limit_readings(disc.components(), readings).items():
            stored = device.state.reading(key)  # stored as JSON (no ETag): unchanged, no new version
            if stored is None or stored.to_json() != reading.to_json():
                device.state.set_reading(key, reading)
        # NOTE: one resource that answers 404, times out or is malformed leaves only its component's
        # readings out: ok answers with everything else, and `error` names each component absent or
        # unknown with the BMC's answer, and the readings the BMC does not report (the wire type has
        # no null, so their fields hold 0); not ok only when nothing could be read at all
        notes = _metrics.failure_notes(disc, disc.components(), readings, node=True, limits=True)
        error = "; ".join([*notes, _metrics.absent_message(absent)] if absent else notes)
        return self._outcome(device, StdMetricsResult(readings.answered(uris), error, metrics))

    async def raw_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[RawMetricsResult]:
        """The raw Redfish documents behind the standard metrics, keyed by URI."""
        device = await prepare(self.pool, self.settings, ctx)
        disc = device.discovery
        uris = _metrics.sources(disc, [*disc.gpus, *disc.cpus, *disc.node], node=True)
        readings = await _metrics.read(device.bmc, uris)
        notes = _metrics.failure_notes(disc, [*disc.gpus, *disc.cpus, *disc.node], readings, node=True)
        result = RawMetricsResult(readings.answered(uris), "; ".join(notes), dict(readings.documents))
        return self._outcome(device, result)

    # ---- streams --------------------------------------------------------------------------------

    def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncIterator[FingerprintResponse]:
        """Inventory and health of every target's GPUs and CPUs, re-sent when it changes."""
        return _streams.fingerprint(self.pool, self.settings, targets or self._configured)

    def stats(self, targets: Sequence[DeviceTarget], interval: float) -> AsyncIterator[StatsResponse]:
        """Power, energy, limit and temperature of every target's node, GPUs and CPUs."""
        return _streams.stats(self.pool, self.settings, targets or self._configured, interval)

    # ---- helpers --------------------------------------------------------------------------------

    async def _allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        if req.profiles is not None:
            _profiles.validate(req.profiles)
        device = await prepare(self.pool, self.settings, ctx)
        scope = rg_scope(req.resource_group)
        applied, policy = await apply_policy_change(device, scope, req.policy, req.gpu_policies)
        result = _results.allocation_result(
            applied, resource_group=req.resource_group, policy=policy, device=device
        )
        pending = None
        if req.profiles is not None:
            profiles, pending = await _profiles.change_profiles(device, req.profiles, scope=scope)
            result = _with_profiles(result, profiles)
        return self._outcome(device, result, pending)

    async def _profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        _profiles.validate(req)
        device = await prepare(self.pool, self.settings, ctx)
        result, pending = await _profiles.change_profiles(device, req)
        return self._outcome(device, result, pending)

    @staticmethod
    def _outcome(device: Device, result: R, pending: PendingVerification | None = None) -> Outcome[R]:
        record_session(device)
        bmc = device.bmc
        return Outcome(
            result,
            state=device.state.to_json(),
            reached_at=bmc.reached_at,
            reach_error=bmc.reach_error,
            verification=pending,
        )


def _with_profiles(result: AllocationResult, profiles: ProfileResult | None) -> AllocationResult:
    if profiles is None:
        return result
    errors = [e for e in (result.error, profiles.error) if e]
    return AllocationResult(
        ok=result.ok and profiles.ok,
        error="; ".join(errors),
        resource_group=result.resource_group,
        policy=result.policy,
        power_cap_watts=result.power_cap_watts,
        gpu_policies=result.gpu_policies,
        profiles=profiles,
        node=result.node,
        cpu=result.cpu,
        memory=result.memory,
    )
