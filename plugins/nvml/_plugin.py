"""`NvmlPlugin`: the local node's NVIDIA GPUs, controlled in-band through NVML.

One device in the inventory is the node the controller runs on; its GPUs are numbered by PCI bus
id (`gpu_id`, see `_gpus.py`) and keyed by UUID. The plugin keeps no device state: everything
that must survive goes into `Outcome.state` (shape in `_state.py`).
"""

from __future__ import annotations

import importlib.metadata
import uuid as uuid_lib
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from plugins.base import (
    Allocation,
    AllocationResult,
    ContainerReservation,
    DeviceContext,
    DevicePlugin,
    DeviceTarget,
    Empty,
    EntityModification,
    EntityModificationResult,
    FingerprintResponse,
    GpuMetricsQuery,
    GpuMetricsResult,
    GpuPoliciesChange,
    GpuPoliciesResult,
    GpuUsage,
    HostEnvironmentError,
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
    SystemSpec,
    VerificationResult,
)
from plugins.nvml import _control, _entity, _nomad, _plugin_config, _profiles, _schema, _telemetry
from plugins.nvml._gpus import enumerate_gpus
from plugins.nvml._library import NvmlLibrary, shared_library
from plugins.nvml._power import GPU_SCOPE, SCOPES, to_watts
from plugins.nvml._state import NvmlState

T = TypeVar("T")


def _version() -> str:
    try:
        return importlib.metadata.version("devicectl")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _now() -> datetime:
    return datetime.now(UTC)


class NvmlPlugin(DevicePlugin):
    """Per-GPU power limits, workload power profiles, metrics and Nomad streams through NVML.

    Args:
        library: the NVML library to use; by default the process-wide one (NVML is initialised
            once per process).
        fingerprint_interval: seconds between fingerprint polls (a response is sent on change).
        verify_after: seconds before the controller should verify a profile change.
        stream_timeout: the most seconds one stream poll or `reserve` waits for NVML.
    """

    #: every setter goes through `_power.set_limit` or `_profiles.update` (receipts, dry run)
    supports_dry_run = True
    info = PluginInfo(
        name="nvml",
        version=_version(),
        vendor="NVIDIA",
        description="in-band GPU power limits and workload power profiles through NVML (nvidia-ml-py)",
    )

    def __init__(
        self,
        library: NvmlLibrary | None = None,
        *,
        fingerprint_interval: float = 30.0,
        verify_after: float = 1.0,
        stream_timeout: float = 10.0,
    ) -> None:
        self._lib = library if library is not None else shared_library()
        self._fingerprint_interval = fingerprint_interval
        self._verify_after = verify_after
        self._stream_timeout = stream_timeout
        self._config = _plugin_config.PluginConfig()

    # ---- plugin-level config (Nomad's `plugin "nvml" { config { ... } }`) -----------------------

    def plugin_config_schema(self) -> Mapping[str, Any]:
        """nomad-device-nvidia's settings plus ours (`plugins.nvml._plugin_config`); per-device
        options stay in `config_schema()` (the inventory's `options`)."""
        return _plugin_config.SCHEMA

    def set_config(self, config: Mapping[str, Any]) -> None:
        """Config decoded with that schema: defaults filled, types checked, unknown keys refused."""
        self._config = _plugin_config.PluginConfig.parse(config)
        self._fingerprint_interval = self._config.fingerprint_period
        self._stream_timeout = self._config.stream_timeout

    def config_schema(self) -> Mapping[str, Any]:
        return {
            "type": "object",
            "properties": {
                "power_scope": {
                    "type": "string",
                    "enum": sorted(SCOPES),
                    "default": GPU_SCOPE,
                    "description": (
                        "which limit GPU caps set: 'gpu' (the GPU alone) or 'module' (GPU plus "
                        "Grace CPU, on GH200/GB200/GB300 superchips only)"
                    ),
                },
            },
            "additionalProperties": False,
        }

    state_version = _schema.STATE_VERSION

    def load_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        return _schema.load_state(state)

    def check_model(self, model: Mapping[str, Any]) -> None:
        _schema.check_model(model)

    async def start(self) -> None:
        """Check the binding (fails if an unofficial `pynvml` shadows nvidia-ml-py) and init NVML."""
        await self._lib.start()

    async def close(self) -> None:
        await self._lib.close()

    # ---- helpers -----------------------------------------------------------------------------

    async def _run(self, ctx: DeviceContext, what: str, job: Callable[[], T]) -> T:
        return await self._lib.run(job, what=what, within=ctx.remaining())

    @staticmethod
    def _scope(ctx: DeviceContext) -> str:
        scope = ctx.endpoint.options.get("power_scope", GPU_SCOPE)
        if scope not in SCOPES:
            raise HostEnvironmentError(
                f"device {ctx.device_id}: inventory option power_scope must be one of "
                f"{', '.join(sorted(SCOPES))}, not {scope!r}"
            )
        return str(scope)

    def _outcome(self, ctx: DeviceContext, answer: _control.Answer) -> Outcome[Any]:
        result, state, payload = answer
        verification = None
        if payload is not None:
            verification = PendingVerification(
                verification_id=str(uuid_lib.uuid4()),
                check_after_seconds=self._verify_after,
                payload=payload,
            )
            result = _with_verification(result, verification.verification_id)
        return Outcome(result, state=state, reached_at=_now(), verification=verification)

    # ---- power operations ----------------------------------------------------------------------

    async def modify_entity(
        self, ctx: DeviceContext, req: EntityModification
    ) -> Outcome[EntityModificationResult]:
        """Two-phase entity modification (the decision table: `plugins.base.entity`)."""
        return await _entity.modify_entity(self, ctx, req)

    async def set_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        """Topology activation: split the policy's GPU element across the GPUs."""
        if req.action is PolicyAction.UNSET:
            return await self.unset_policy(ctx, req)
        policy = req.policy
        if policy is None:
            raise InvalidRequestError("topology activation needs a policy")
        spec, scope = SystemSpec.from_model(ctx.model), self._scope(ctx)
        answer = await self._run(
            ctx, "topology activation", lambda: _control.topology_set(ctx.state, spec, scope, policy)
        )
        return self._outcome(ctx, answer)

    async def unset_policy(self, ctx: DeviceContext, req: PolicyChange) -> Outcome[AllocationResult]:
        """Topology deactivation: the spec's idle policy, else the limits from before our changes."""
        spec, scope = SystemSpec.from_model(ctx.model), self._scope(ctx)
        unset = _control.topology_retain if req.retain_limits else _control.topology_unset
        answer = await self._run(ctx, "topology deactivation", lambda: unset(ctx.state, spec, scope))
        return self._outcome(ctx, answer)

    async def _allocation(self, ctx: DeviceContext, req: Allocation, kind: str) -> Outcome[AllocationResult]:
        spec, scope = SystemSpec.from_model(ctx.model), self._scope(ctx)
        answer = await self._run(
            ctx,
            f"resource group {kind}",
            lambda: _control.allocation(ctx.state, spec, scope, req, kind),
        )
        return self._outcome(ctx, answer)

    async def activate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "activate")

    async def update_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "update")

    async def deactivate_allocation(self, ctx: DeviceContext, req: Allocation) -> Outcome[AllocationResult]:
        return await self._allocation(ctx, req, "deactivate")

    async def update_gpu_policies(
        self, ctx: DeviceContext, req: GpuPoliciesChange
    ) -> Outcome[GpuPoliciesResult]:
        scope = self._scope(ctx)
        answer = await self._run(
            ctx, "GPU policies update", lambda: _control.gpu_policies(ctx.state, scope, req)
        )
        return self._outcome(ctx, answer)

    async def _profiles(self, ctx: DeviceContext, req: ProfileChange, what: str) -> Outcome[ProfileResult]:
        answer = await self._run(ctx, what, lambda: _control.profiles(ctx.state, req))
        return self._outcome(ctx, answer)

    async def enable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "enable workload profiles")

    async def disable_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "disable workload profiles")

    async def update_profiles(self, ctx: DeviceContext, req: ProfileChange) -> Outcome[ProfileResult]:
        return await self._profiles(ctx, req, "update workload profiles")

    async def verify(self, ctx: DeviceContext, pending: PendingVerification) -> VerificationResult:
        """Re-read the requested profile masks of a profile change."""
        if pending.payload.get("check") != "workload_profiles":
            return VerificationResult(
                True, "failed", f"unknown verification {pending.payload.get('check')!r}"
            )
        return await self._run(ctx, "verify workload profiles", lambda: _profiles.verify(pending.payload))

    # ---- reads ---------------------------------------------------------------------------------

    async def ping(self, ctx: DeviceContext, req: Ping) -> Outcome[PingResult]:
        """NVML reachable, the GPUs all there (as many as the device model says), none lost."""
        spec = SystemSpec.from_model(ctx.model)

        def job() -> tuple[PingResult, dict[str, Any] | None]:
            state = NvmlState(ctx.state)
            before = state.known_gpus()
            inv = _control.inventory(state)
            problems = inv.problems()
            if not inv.gpus:
                problems.append("NVML sees no GPU")
            elif spec.gpu.count and len(inv.gpus) < spec.gpu.count:
                problems.append(f"NVML sees {len(inv.gpus)} GPU(s); the device model says {spec.gpu.count}")
            summary = f"driver {_telemetry.driver_version()}, {len(inv.gpus)} GPU(s)"
            result = PingResult(
                ok=not problems, error=f"{'; '.join(problems)} ({summary})" if problems else ""
            )
            return result, (state.to_json() if state.known_gpus() != before else None)

        result, state = await self._run(ctx, "ping", job)
        return Outcome(result, state=state, reached_at=_now())

    async def gpu_metrics(self, ctx: DeviceContext, req: GpuMetricsQuery) -> Outcome[GpuMetricsResult]:
        def job() -> tuple[list[_telemetry.Reading], list[str]]:
            inv = enumerate_gpus(NvmlState(ctx.state).known_gpus())
            readings = [_telemetry.read(gpu, full=False) for gpu in inv.select(req.gpu_ids)]
            return readings, ([] if req.gpu_ids else inv.unidentified)

        readings, unidentified = await self._run(ctx, "read GPU power", job)
        metrics = tuple(GpuUsage(r.gpu_id, to_watts(r.power_mw)) for r in readings if r.power_mw is not None)
        failed = [_telemetry.failure(r, "power") for r in readings if r.power_mw is None] + unidentified
        return Outcome(
            GpuMetricsResult(ok=not failed, error="; ".join(failed), metrics=metrics), reached_at=_now()
        )

    async def _readings(
        self, ctx: DeviceContext, profiles: bool
    ) -> tuple[list[_telemetry.Reading], list[str]]:
        """Full readings of every GPU, and why NVML devices that could not be identified failed."""

        def job() -> tuple[list[_telemetry.Reading], list[str]]:
            inv = enumerate_gpus(NvmlState(ctx.state).known_gpus())
            return [_telemetry.read(gpu, profiles=profiles) for gpu in inv.gpus], inv.unidentified

        return await self._run(ctx, "read GPU metrics", job)

    async def std_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[StdMetricsResult]:
        """Per-GPU power, energy, limits and temperature; node power is the GPUs' sum (see docs)."""
        readings, unidentified = await self._readings(ctx, profiles=False)
        node = _telemetry.node_metrics(ctx.device_id, readings, _now())
        failed = [_telemetry.failure(r, "metrics") for r in readings if not r.ok] + unidentified
        return Outcome(
            StdMetricsResult(ok=not failed, error="; ".join(failed), metrics=node), reached_at=_now()
        )

    async def raw_metrics(self, ctx: DeviceContext, req: Empty) -> Outcome[RawMetricsResult]:
        """Every reading in NVML's own units (mW, mJ, °C, MHz, %), keyed by GPU UUID."""
        readings, unidentified = await self._readings(ctx, profiles=True)
        documents: dict[str, Any] = {
            "nvml": {
                "driver_version": self._lib.driver_version,
                "nvidia_ml_py": self._lib.binding_version,
                "gpu_count": len(readings),
                "profile_ids": f"NVML ids; out-of-band id = NVML id + {_profiles.OOB_OFFSET}",
            }
        }
        for r in readings:
            documents[r.uuid] = asdict(r)
        failed = [_telemetry.failure(r, "metrics") for r in readings if not r.ok] + unidentified
        return Outcome(
            RawMetricsResult(ok=not failed, error="; ".join(failed), documents=documents), reached_at=_now()
        )

    # ---- Nomad's trio ----------------------------------------------------------------------------

    def fingerprint(self, targets: Sequence[DeviceTarget]) -> AsyncGenerator[FingerprintResponse, None]:
        """This node's GPUs grouped by model (`targets` is not used: NVML sees the local node only)."""
        return _nomad.fingerprints(self._lib, self._config, self._fingerprint_interval, self._stream_timeout)

    def stats(self, targets: Sequence[DeviceTarget], interval: float) -> AsyncGenerator[StatsResponse, None]:
        """Every `interval` seconds, each GPU's power, energy, temperatures, clocks, utilisation, limits."""
        return _nomad.stats(self._lib, self._config, interval, self._stream_timeout)

    async def reserve(self, device_ids: Sequence[str]) -> ContainerReservation:
        """`NVIDIA_VISIBLE_DEVICES` with the GPUs' UUIDs, and their device nodes."""
        return await _nomad.reserve(self._lib, self._config, device_ids, self._stream_timeout)


def _with_verification(result: Any, verification_id: str) -> Any:
    """Put the verification id into the profile result (standalone or inside an allocation)."""
    if isinstance(result, ProfileResult):
        return replace(result, verification_id=verification_id)
    if isinstance(result, AllocationResult) and result.profiles is not None:
        return replace(result, profiles=replace(result.profiles, verification_id=verification_id))
    return result
