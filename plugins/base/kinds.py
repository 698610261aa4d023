"""The one table of request kinds, as plugins and the plugin protocol see them.

A row (`Kind`) says everything about a kind that does not touch the controller's API protobuf: its
name (the member of `DeviceControllerRequest`'s `request` oneof and of the response's `response`
oneof, and the kind an out-of-process plugin receives on `PowerOperations.Operate`), its domain
request and result types, the `DevicePlugin` coroutine that serves it, and whether it only reads.
`run_operation`, the plugin process's `Operate` handler, the controller's plugin proxy and the
controller's dispatcher derive from it; the controller extends each row with its protobuf
translation and validation (`controller.translate.kinds`).

Adding a kind: a member in `proto/devicecontroller/v1/devicecontroller.proto`, a row here (with a
`RequestKind` name for code that refers to it), its translation row in the controller, and the
plugin coroutine. `KINDS.register` adds a row at run time (a plugin's own kind, or a test's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from plugins.base import _types as t
from plugins.base.health import HealthQuery, HealthResult


@dataclass(frozen=True)
class Kind:
    """One request kind."""

    #: the oneof member name on the controller's API, and the kind's name on the plugin protocol
    name: str
    #: the domain request type a plugin receives
    request: type
    #: the domain result type a plugin answers with (in its `Outcome`)
    result: type
    #: the `DevicePlugin` coroutine serving the kind: `async def method(ctx, request) -> Outcome`
    method: str
    #: the kind only reads the device: running it late undoes nothing, so it is never superseded
    #: by a newer request (a readiness check's write cycle restores every cap it changes)
    reads_only: bool = False

    def may_write(self, request: object) -> bool:
        """Whether a call of this kind with `request` may write the device (a readiness check that
        may run a write cycle does): such calls take the device's one writer in a plugin process."""
        return not self.reads_only or (isinstance(request, HealthQuery) and request.may_write)


class KindTable:
    """The request kinds by name; iterates in registration order."""

    def __init__(self, rows: tuple[Kind, ...] = ()) -> None:
        self._rows: dict[str, Kind] = {}
        for row in rows:
            self.register(row)

    def register(self, row: Kind) -> None:
        """Add a kind. Raises ValueError when its name or plugin coroutine is already taken."""
        if row.name in self._rows:
            raise ValueError(f"request kind {row.name!r} is already registered")
        taken = next((r.name for r in self._rows.values() if r.method == row.method), None)
        if taken is not None:
            raise ValueError(f"plugin coroutine {row.method!r} already serves {taken!r}")
        self._rows[row.name] = row

    def unregister(self, name: str) -> None:
        del self._rows[name]

    @contextlib.contextmanager
    def registered(self, row: Kind) -> Iterator[Kind]:
        """The kind registered for the duration of a `with` block."""
        self.register(row)
        try:
            yield row
        finally:
            self.unregister(row.name)

    def __getitem__(self, name: str) -> Kind:
        return self._rows[name]

    def get(self, name: str) -> Kind | None:
        return self._rows.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._rows

    def __iter__(self) -> Iterator[Kind]:
        return iter(tuple(self._rows.values()))

    def __len__(self) -> int:
        return len(self._rows)

    def names(self) -> tuple[str, ...]:
        """The kinds' names, as plain strings."""
        return tuple(str(name) for name in self._rows)


K = t.RequestKind

#: every request kind; `RequestKind` names the built-in ones for code that refers to a kind
KINDS = KindTable(
    (
        Kind(K.RESOURCE_GROUP_ACTIVATE, t.Allocation, t.AllocationResult, "activate_allocation"),
        Kind(K.RESOURCE_GROUP_DEACTIVATE, t.Allocation, t.AllocationResult, "deactivate_allocation"),
        Kind(K.RESOURCE_GROUP_UPDATE, t.Allocation, t.AllocationResult, "update_allocation"),
        # topology kinds answer with an allocation result
        Kind(K.TOPOLOGY_ACTIVATE, t.PolicyChange, t.AllocationResult, "set_policy"),
        Kind(K.TOPOLOGY_DEACTIVATE, t.PolicyChange, t.AllocationResult, "unset_policy"),
        Kind(K.GPU_POLICIES_UPDATE, t.GpuPoliciesChange, t.GpuPoliciesResult, "update_gpu_policies"),
        Kind(K.ENABLE_WORKLOAD_PROFILE, t.ProfileChange, t.ProfileResult, "enable_profiles"),
        Kind(K.DISABLE_WORKLOAD_PROFILE, t.ProfileChange, t.ProfileResult, "disable_profiles"),
        Kind(K.UPDATE_WORKLOAD_PROFILE, t.ProfileChange, t.ProfileResult, "update_profiles"),
        Kind(K.PING, t.Ping, t.PingResult, "ping", reads_only=True),
        Kind(K.GPU_METRICS, t.GpuMetricsQuery, t.GpuMetricsResult, "gpu_metrics", reads_only=True),
        Kind(K.RAW_METRICS, t.Empty, t.RawMetricsResult, "raw_metrics", reads_only=True),
        Kind(K.STD_METRICS, t.Empty, t.StdMetricsResult, "std_metrics", reads_only=True),
        Kind(K.MODIFY_ENTITY_MODEL, t.EntityModification, t.EntityModificationResult, "modify_entity"),
        Kind(K.BMC_HEALTH, HealthQuery, HealthResult, "bmc_health", reads_only=True),
    )
)


def kind_of(name: str) -> Kind:
    """The row of a kind name (a `RequestKind` is one).

    Raises:
        KeyError: naming the kind and the known ones, when no row has that name.
    """
    row = KINDS.get(name)
    if row is None:
        raise KeyError(f"unknown request kind {str(name)!r} (known: {', '.join(KINDS.names())})")
    return row
