"""The device state JSON this plugin owns (the controller persists it; the plugin keeps nothing).

Shape (version 1)::

    {
      "version": 1,
      "plugin": "nvml",
      "gpus": {"GPU-…": {"pci_bus_id": "00000000:18:00.0", "name": "NVIDIA H100 80GB HBM3"}},
      "limits": {"GPU-…": {"gpu": {"prior_mw": 700000, "requested_mw": 500000}}},
      "policies": {
        "topology": {"source": "topology" | "idle", "policy": POLICY},
        "resource_group": {"name": "rg-1", "policy": POLICY | null},
        "gpu": {"resource_group": "rg-1", "current_policy": POLICY | null,
                "limits": {"3": {"watts": 500.0}, "4": {"percent": 80.0}}}
      },
      "profiles": {"GPU-…": {"prior_requested": [5], "enabled": [2, 4]}}
    }

with POLICY = `{"name": …, "limits": [{"element": "gpu", "watts": 2800.0}], "properties": {…}}`.

- `gpus`: every GPU seen, so a lost GPU keeps its `gpu_id` slot (see `_gpus.py`).
- `limits[uuid][scope]`: `prior_mw` is the limit read just before devicectl's *first* change in that
  power scope ("gpu" or "module"); later changes never overwrite it, and restoring removes the
  entry. `requested_mw` is the last limit devicectl set (to spot limits that reverted).
- `policies`: the layers that decide each GPU's cap, highest first: the resource group's policy,
  then the topology policy (or the spec's idle policy after a topology deactivation), then the
  `current_policy` sent with GPU policies; GPU-specific limits override the GPU share.
- `profiles[uuid]`: NVML profile ids (not the out-of-band ids of requests, which are NVML + 3):
  the requested set before devicectl's first change, and the ids devicectl enabled since.

Unknown keys are kept as they are, so a newer plugin version's additions survive a rollback.
The controller passes every state through `_schema.load_state` (checked, migrated) first.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from plugins.base import (
    ElementType,
    GpuPolicy,
    Policy,
    PolicyLimit,
    PowerLimit,
)
from plugins.nvml._gpus import KnownGpu, known_from_state
from plugins.nvml._schema import STATE_VERSION as VERSION


def policy_to_json(policy: Policy | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    return {
        "name": policy.name,
        "limits": [{"element": item.element.value, **limit_to_json(item.limit)} for item in policy.limits],
        "properties": dict(policy.properties),
    }


def policy_from_json(raw: Any) -> Policy | None:
    if not isinstance(raw, Mapping):
        return None
    limits = []
    for item in raw.get("limits", ()) or ():
        if not isinstance(item, Mapping):
            continue
        limit = limit_from_json(item)
        try:
            element = ElementType(str(item.get("element", "")))
        except ValueError:
            continue
        if limit is not None:
            limits.append(PolicyLimit(element, limit))
    properties = raw.get("properties")
    return Policy(
        name=str(raw.get("name", "")),
        limits=tuple(limits),
        properties=dict(properties) if isinstance(properties, Mapping) else {},
    )


def limit_to_json(limit: PowerLimit) -> dict[str, float]:
    if limit.watts is not None:
        return {"watts": float(limit.watts)}
    assert limit.percent is not None
    return {"percent": float(limit.percent)}


def limit_from_json(raw: Mapping[str, Any]) -> PowerLimit | None:
    try:
        if raw.get("watts") is not None:
            return PowerLimit(watts=float(raw["watts"]))
        if raw.get("percent") is not None:
            return PowerLimit(percent=float(raw["percent"]))
    except (TypeError, ValueError):
        return None
    return None


class NvmlState:
    """A mutable working copy of the device state; `to_json()` is what `Outcome.state` gets."""

    def __init__(self, raw: Mapping[str, Any] | None = None) -> None:
        data = copy.deepcopy(dict(raw or {}))
        self._data: dict[str, Any] = data
        for key in ("gpus", "limits", "policies", "profiles"):
            if not isinstance(data.get(key), dict):
                data[key] = {}

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self._data)
        out["version"] = VERSION
        out["plugin"] = "nvml"
        return out

    # ---- GPUs ----------------------------------------------------------------------------

    def known_gpus(self) -> dict[str, KnownGpu]:
        return known_from_state(self._data["gpus"])

    def set_known_gpus(self, gpus: Mapping[str, Mapping[str, str]]) -> None:
        self._data["gpus"] = {uuid: dict(entry) for uuid, entry in gpus.items()}

    def prune(self, uuids: set[str]) -> None:
        """Drop limit and profile records of GPUs that are no longer in the inventory."""
        for key in ("limits", "profiles"):
            for uuid in [u for u in self._data[key] if u not in uuids]:
                del self._data[key][uuid]

    # ---- limits --------------------------------------------------------------------------

    def limit_record(self, uuid: str, scope: str) -> dict[str, Any] | None:
        record = self._data["limits"].get(uuid, {}).get(scope)
        return record if isinstance(record, dict) else None

    def recorded_scopes(self, uuid: str) -> list[str]:
        entry = self._data["limits"].get(uuid)
        return sorted(entry) if isinstance(entry, dict) else []

    def record_prior(self, uuid: str, scope: str, prior_mw: int) -> None:
        """Remember the limit before devicectl's first change; later calls keep the first value."""
        entry = self._data["limits"].setdefault(uuid, {})
        entry.setdefault(scope, {}).setdefault("prior_mw", int(prior_mw))

    def record_requested(self, uuid: str, scope: str, requested_mw: int) -> None:
        self._data["limits"].setdefault(uuid, {}).setdefault(scope, {})["requested_mw"] = int(requested_mw)

    def forget_limit(self, uuid: str, scope: str) -> None:
        entry = self._data["limits"].get(uuid)
        if isinstance(entry, dict):
            entry.pop(scope, None)
            if not entry:
                del self._data["limits"][uuid]

    def limit_uuids(self) -> list[str]:
        return list(self._data["limits"])

    # ---- policy layers --------------------------------------------------------------------

    @property
    def _policies(self) -> dict[str, Any]:
        policies: dict[str, Any] = self._data["policies"]
        return policies

    def set_topology(self, policy: Policy | None, source: str = "topology") -> None:
        if policy is None:
            self._policies.pop("topology", None)
        else:
            self._policies["topology"] = {"source": source, "policy": policy_to_json(policy)}

    def topology(self) -> Policy | None:
        layer = self._policies.get("topology")
        return policy_from_json(layer.get("policy")) if isinstance(layer, Mapping) else None

    def set_resource_group(self, name: str, policy: Policy | None) -> None:
        self._policies["resource_group"] = {"name": name, "policy": policy_to_json(policy)}

    def resource_group(self) -> tuple[str, Policy | None] | None:
        layer = self._policies.get("resource_group")
        if not isinstance(layer, Mapping):
            return None
        return str(layer.get("name", "")), policy_from_json(layer.get("policy"))

    def clear_resource_group(self) -> None:
        self._policies.pop("resource_group", None)

    def gpu_layer(self) -> tuple[str, Policy | None, dict[int, PowerLimit]] | None:
        layer = self._policies.get("gpu")
        if not isinstance(layer, Mapping):
            return None
        limits: dict[int, PowerLimit] = {}
        raw_limits = layer.get("limits")
        for key, value in (raw_limits if isinstance(raw_limits, Mapping) else {}).items():
            limit = limit_from_json(value) if isinstance(value, Mapping) else None
            if limit is not None and str(key).isdigit():
                limits[int(key)] = limit
        return str(layer.get("resource_group", "")), policy_from_json(layer.get("current_policy")), limits

    def update_gpu_layer(
        self, resource_group: str, current_policy: Policy | None, policies: tuple[GpuPolicy, ...]
    ) -> None:
        """Merge GPU-specific policies: a limit sets that GPU's, `limit=None` removes it."""
        existing = self.gpu_layer()
        limits = dict(existing[2]) if existing else {}
        for item in policies:
            if item.limit is None:
                limits.pop(item.gpu_id, None)
            else:
                limits[item.gpu_id] = item.limit
        if current_policy is None and existing is not None:
            current_policy = existing[1]
        self._policies["gpu"] = {
            "resource_group": resource_group,
            "current_policy": policy_to_json(current_policy),
            "limits": {str(k): limit_to_json(v) for k, v in sorted(limits.items())},
        }

    def clear_gpu_layer(self, resource_group: str | None = None) -> None:
        """Drop the GPU-specific policies (only those of `resource_group`, when given)."""
        layer = self.gpu_layer()
        if layer is not None and (resource_group is None or layer[0] in ("", resource_group)):
            self._policies.pop("gpu", None)

    def effective_policy(self) -> Policy | None:
        """The node policy in force: resource group > topology (or idle) > GPU layer's current one."""
        group = self.resource_group()
        if group is not None and group[1] is not None:
            return group[1]
        topology = self.topology()
        if topology is not None:
            return topology
        layer = self.gpu_layer()
        return layer[1] if layer is not None else None

    def gpu_policies(self) -> tuple[GpuPolicy, ...]:
        layer = self.gpu_layer()
        if layer is None:
            return ()
        return tuple(GpuPolicy(gpu_id, limit) for gpu_id, limit in sorted(layer[2].items()))

    # ---- profiles ------------------------------------------------------------------------

    def profile_record(self, uuid: str) -> dict[str, list[int]] | None:
        entry = self._data["profiles"].get(uuid)
        return entry if isinstance(entry, dict) else None

    def record_profiles(self, uuid: str, prior_requested: set[int], enabled: set[int]) -> None:
        entry = self._data["profiles"].setdefault(uuid, {})
        entry.setdefault("prior_requested", sorted(prior_requested))
        entry["enabled"] = sorted(enabled)

    def forget_profiles(self, uuid: str) -> None:
        self._data["profiles"].pop(uuid, None)

    def profile_uuids(self) -> list[str]:
        return list(self._data["profiles"])
