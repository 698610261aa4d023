"""Domain types for requests and results: what plugins take and return (never protobuf).

One request type per request kind and one result type per response message. The controller's
translation layer (`controller.translate`) maps them to and from the wire, both directions.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from plugins.base._fields import plain_init
from plugins.base.health import HealthQuery, HealthResult


class RequestKind(enum.StrEnum):
    """Names of the built-in request kinds, for code that refers to one; each is its oneof member
    name on the wire. The kinds themselves, with their types and plugin coroutines, are the rows of
    `plugins.base.kinds.KINDS` (a kind registered at run time has a row and no name here)."""

    RESOURCE_GROUP_ACTIVATE = "resource_group_activate"
    RESOURCE_GROUP_DEACTIVATE = "resource_group_deactivate"
    RESOURCE_GROUP_UPDATE = "resource_group_update"
    TOPOLOGY_ACTIVATE = "topology_activate"
    TOPOLOGY_DEACTIVATE = "topology_deactivate"
    GPU_POLICIES_UPDATE = "gpu_policies_update"
    ENABLE_WORKLOAD_PROFILE = "enable_workload_profile"
    DISABLE_WORKLOAD_PROFILE = "disable_workload_profile"
    UPDATE_WORKLOAD_PROFILE = "update_workload_profile"
    PING = "ping"
    GPU_METRICS = "gpu_metrics"
    RAW_METRICS = "raw_metrics"
    STD_METRICS = "std_metrics"
    MODIFY_ENTITY_MODEL = "modify_entity_model"
    BMC_HEALTH = "bmc_health"


class PolicyAction(enum.Enum):
    SET = "set"
    UNSET = "unset"


class ElementType(enum.Enum):
    """Component a policy limit applies to. Watts are node totals across that component type."""

    NODE = "node"
    GPU = "gpu"
    CPU = "cpu"
    MEMORY = "memory"


@dataclass(frozen=True)
class PowerLimit:
    """Exactly one of `watts` or `percent` (of the component's maximum)."""

    watts: float | None = None
    percent: float | None = None

    def __post_init__(self) -> None:
        if (self.watts is None) == (self.percent is None):
            raise ValueError("PowerLimit needs exactly one of watts or percent")
        value = self.watts if self.watts is not None else self.percent
        assert value is not None
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError(f"power limit must be a finite, non-negative number, got {value}")

    def resolve(self, max_watts: float | None) -> float:
        """Watts for this limit; a percentage needs the component's maximum."""
        if self.watts is not None:
            return self.watts
        if max_watts is None:
            raise ValueError("a percentage limit needs the component's maximum watts (device spec)")
        assert self.percent is not None
        return max_watts * self.percent / 100.0


@dataclass(frozen=True)
class PolicyLimit:
    element: ElementType
    limit: PowerLimit


@dataclass(frozen=True)
class Policy:
    """A named node policy: at most one limit per element type."""

    name: str
    limits: tuple[PolicyLimit, ...] = ()
    properties: Mapping[str, Any] = field(default_factory=dict)

    def limit_for(self, element: ElementType) -> PowerLimit | None:
        for item in self.limits:
            if item.element is element:
                return item.limit
        return None


@dataclass(frozen=True)
class GpuPolicy:
    """A GPU-specific cap; `limit=None` removes the GPU-specific policy."""

    gpu_id: int
    limit: PowerLimit | None


# ---- requests -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyChange:
    """Set or unset the node policy (topology activate/deactivate, or part of an allocation)."""

    action: PolicyAction
    policy: Policy | None = None
    #: topology deactivation only: keep the limits in force (DPS's "retain device limits after
    #: topology deactivation") instead of applying the idle policy or restoring; set by the controller
    #: from its configuration, never by a request
    retain_limits: bool = False


@dataclass(frozen=True)
class GpuPoliciesChange:
    """Set GPU-specific policies, or reset them (then `policies` is ignored)."""

    resource_group: str
    action: PolicyAction
    current_policy: Policy | None = None
    policies: tuple[GpuPolicy, ...] = ()


@dataclass(frozen=True)
class ProfileChange:
    """Workload power profiles to enable/disable. Ids are out-of-band (Redfish) ids: 3..258."""

    enable: tuple[int, ...] = ()
    disable: tuple[int, ...] = ()
    verify: bool = True


@dataclass(frozen=True)
class Allocation:
    """Resource group activation/update/deactivation; a None part means "no change"."""

    resource_group: str
    policy: PolicyChange | None = None
    gpu_policies: GpuPoliciesChange | None = None
    profiles: ProfileChange | None = None


@dataclass(frozen=True)
class Ping:
    retry_count: int = 0


@dataclass(frozen=True)
class GpuMetricsQuery:
    """Empty `gpu_ids` means every GPU."""

    gpu_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class EntityModification:
    phase: int
    old_model: Mapping[str, Any]
    new_model: Mapping[str, Any]
    old_default_policy: Policy | None = None
    new_default_policy: Policy | None = None
    resource_group: str = ""


@dataclass(frozen=True)
class Empty:
    """The request of raw_metrics and std_metrics."""


DeviceRequest = (
    Allocation
    | PolicyChange
    | GpuPoliciesChange
    | ProfileChange
    | Ping
    | GpuMetricsQuery
    | EntityModification
    | HealthQuery
    | Empty
)


# ---- results --------------------------------------------------------------------------------


class WriteOutcome(enum.Enum):
    """What a request did to one component, whatever its `ok` says.

    A failed request says exactly what it changed: the topology service must never be told less
    than what happened on the device.
    """

    #: the device accepted the write (the read-back, if any, is `applied_watts`)
    WRITTEN = "written"
    #: nothing was sent, or the device refused it (nothing changed; `applied_watts` is the value
    #: in force as last read, 0 when none was read)
    NOT_WRITTEN = "not written"
    #: the write was sent and the device's answer never came: it may or may not have landed
    UNKNOWN = "unknown (the BMC's answer never came)"

    @classmethod
    def of_all(cls, outcomes: Iterable[WriteOutcome]) -> WriteOutcome:
        """One component's outcome from several writes (or an element's parts): unknown if any
        is, else written if any was; a refusal after a write never hides that write."""
        seen = set(outcomes)
        return next((w for w in (cls.UNKNOWN, cls.WRITTEN) if w in seen), cls.NOT_WRITTEN)


@plain_init  # made for every request's response
@dataclass(frozen=True)
class ComponentResult:
    """Result of applying a limit to one component (node, CPU, memory, or one GPU).

    `applied_watts` is what the device reports after the write (read back), not what was asked.
    `write` says what happened on the device (None: the plugin does not say).
    """

    ok: bool
    applied_watts: float = 0.0
    requested_watts: float | None = None
    message: str = ""
    write: WriteOutcome | None = None


@plain_init  # made for every request's response
@dataclass(frozen=True)
class GpuResult:
    gpu_id: int
    ok: bool
    applied_watts: float = 0.0
    requested_watts: float | None = None
    message: str = ""
    write: WriteOutcome | None = None


@plain_init  # made for every request's response
@dataclass(frozen=True)
class GpuPoliciesResult:
    resource_group: str = ""
    results: tuple[GpuResult, ...] = ()


@dataclass(frozen=True)
class GpuProfileStatus:
    gpu_id: str
    ok: bool
    enforced: tuple[int, ...] = ()
    message: str = ""


@dataclass(frozen=True)
class ProfileResult:
    ok: bool
    error: str = ""
    gpus: tuple[GpuProfileStatus, ...] = ()
    verification_id: str = ""


@plain_init  # made for every request's response
@dataclass(frozen=True)
class AllocationResult:
    """Result of a resource group or topology (de)activation.

    `power_cap_watts` is the node cap in force afterwards (0 when none).
    """

    ok: bool
    error: str = ""
    resource_group: str = ""
    policy: Policy | None = None
    power_cap_watts: float = 0.0
    gpu_policies: GpuPoliciesResult | None = None
    profiles: ProfileResult | None = None
    node: ComponentResult | None = None
    cpu: ComponentResult | None = None
    memory: ComponentResult | None = None


@dataclass(frozen=True)
class PingResult:
    ok: bool
    error: str = ""


@dataclass(frozen=True)
class GpuUsage:
    gpu_id: int
    watts: float


@dataclass(frozen=True)
class GpuMetricsResult:
    ok: bool
    error: str = ""
    metrics: tuple[GpuUsage, ...] = ()


@dataclass(frozen=True)
class RawMetricsResult:
    """Raw device documents (e.g. Redfish JSON by URI). Sent as a google.protobuf.Struct in an Any."""

    ok: bool
    error: str = ""
    documents: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ComponentMetrics:
    id: str
    power_watts: float = 0.0
    energy_joules: float = 0.0
    limit_watts: float = 0.0
    min_watts: float = 0.0
    max_watts: float = 0.0
    temperature_celsius: float = 0.0


@dataclass(frozen=True)
class NodeMetrics:
    name: str
    power_watts: float = 0.0
    gpus: tuple[ComponentMetrics, ...] = ()
    cpus: tuple[ComponentMetrics, ...] = ()
    memory_units: int = 0
    sampled_at: datetime | None = None


@dataclass(frozen=True)
class StdMetricsResult:
    ok: bool
    error: str = ""
    metrics: NodeMetrics | None = None


class EntityVerdict(enum.Enum):
    ACCEPTED = "accepted"
    ACCEPTED_CALL_PHASE_1 = "accepted_call_phase_1"
    REJECTED = "rejected"


@dataclass(frozen=True)
class EntityModificationResult:
    verdict: EntityVerdict
    message: str = ""


DeviceResult = (
    AllocationResult
    | GpuPoliciesResult
    | ProfileResult
    | PingResult
    | GpuMetricsResult
    | RawMetricsResult
    | StdMetricsResult
    | EntityModificationResult
    | HealthResult
)
