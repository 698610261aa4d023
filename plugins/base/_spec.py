"""Device specifications: what a node is made of and its power limits.

The topology sends a device model JSON that is in practice the entity plus its device spec
(DPS `ComputerSystemSpec`: devices by type with counts, min/max load watts, idle policy,
processor module count). `SystemSpec.from_model` normalises the shapes seen in practice and
fills gaps from a small catalogue of known models. Catalogue numbers come from the DPS device
specs where published (DGX_GB200); the others are conservative and marked as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from plugins.base._types import ElementType, Policy, PolicyLimit, PowerLimit


@dataclass(frozen=True)
class ComponentSpec:
    """Count and per-component limits of one component type (watts per component)."""

    count: int = 0
    min_watts: float | None = None
    max_watts: float | None = None
    model: str = ""
    wpps_support: bool = False


@dataclass(frozen=True)
class SystemSpec:
    """A normalised node description."""

    model: str = "GENERIC"
    name: str = ""
    plugin: str = ""
    node: ComponentSpec = field(default_factory=lambda: ComponentSpec(count=1))
    gpu: ComponentSpec = field(default_factory=ComponentSpec)
    cpu: ComponentSpec = field(default_factory=ComponentSpec)
    memory: ComponentSpec = field(default_factory=ComponentSpec)
    processor_modules: int = 0
    idle_policy: Policy | None = None
    redfish_url: str = ""
    secret_name: str = ""

    def component(self, element: ElementType) -> ComponentSpec:
        # NOTE: told by identity, not by a dict per call (an enum member's hash is a Python call)
        if element is ElementType.NODE:
            return self.node
        if element is ElementType.GPU:
            return self.gpu
        if element is ElementType.CPU:
            return self.cpu
        if element is ElementType.MEMORY:
            return self.memory
        raise KeyError(element)

    @classmethod
    def from_model(cls, model: Mapping[str, Any]) -> SystemSpec:
        """Build a spec from a device model JSON object (entity and/or spec), over the catalogue."""
        model_name = str(_first(model, "Model", "model") or "")
        spec = cls.known(model_name) if model_name else cls()
        body = _first(model, "spec", "Spec") or {}
        if not isinstance(body, Mapping):
            body = {}
        redfish = _first(model, "Redfish", "redfish") or {}
        if not isinstance(redfish, Mapping):
            redfish = {}
        node = _limits(spec.node, body, count=1)
        updates: dict[str, Any] = {
            "name": str(_first(model, "Name", "name") or spec.name),
            "plugin": str(
                _first(model, "power_policy_plugin", "powerPolicyPlugin")
                or body.get("powerPolicyPlugin")
                or spec.plugin
            ),
            "node": node,
            "processor_modules": int(body.get("processorModulesCount", spec.processor_modules) or 0),
            "redfish_url": str(_first(redfish, "URL", "url") or spec.redfish_url),
            "secret_name": str(_first(redfish, "SecretName", "secret_name") or spec.secret_name),
        }
        for device in body.get("devices", ()) or ():
            if not isinstance(device, Mapping):
                continue
            kind = str(device.get("type", "")).lower()
            if kind not in ("gpu", "cpu", "memory"):
                continue
            current: ComponentSpec = getattr(spec, kind)
            inner = device.get("spec")
            sub: Mapping[str, Any] = inner if isinstance(inner, Mapping) else device
            merged = _limits(current, sub, count=int(device.get("count", current.count) or 0))
            merged = replace(merged, model=str(device.get("model", current.model)))
            updates[kind] = merged
        for kind in ("gpu", "cpu", "memory"):
            extra = body.get(f"{kind}Spec") or model.get(f"{kind}Spec")
            if isinstance(extra, Mapping):
                updates[kind] = _limits(updates.get(kind, getattr(spec, kind)), extra, count=None)
        idle = body.get("idlePolicy")
        if isinstance(idle, Mapping):
            updates["idle_policy"] = policy_from_element_map("idle", idle)
        return replace(spec, model=model_name or spec.model, **updates)

    @classmethod
    def known(cls, model_name: str) -> SystemSpec:
        """The catalogue entry for a model name, or a generic spec with no known limits."""
        found = CATALOGUE.get(model_name.upper())  # the generic one made only where none is
        return found if found is not None else replace(cls(), model=model_name)


def policy_from_element_map(name: str, limits: Mapping[str, Any]) -> Policy:
    """Parse `{Node: {watts: 1000}, GPU: {percentage: 80}}` (the YAML idle-policy shape)."""
    items = []
    for key, value in limits.items():
        element = ElementType(str(key).lower())
        if isinstance(value, Mapping):
            watts = _first(value, "watts", "Watts")
            pct = _first(value, "percentage", "Percentage", "percent")
            limit = PowerLimit(watts=float(watts)) if watts is not None else PowerLimit(percent=float(pct))
        else:
            limit = PowerLimit(watts=float(value))
        items.append(PolicyLimit(element, limit))
    return Policy(name=name, limits=tuple(items))


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in mapping and mapping[key] is not None:
            return mapping[key]
    return None


def _limits(base: ComponentSpec, body: Mapping[str, Any], count: int | None) -> ComponentSpec:
    lo = _first(body, "minLoadWatts", "min_load_watts")
    hi = _first(body, "maxLoadWatts", "max_load_watts")
    wpps = _first(body, "wppsSupport", "wpps_support")
    return replace(
        base,
        count=base.count if count is None else count,
        min_watts=float(lo) if lo is not None else base.min_watts,
        max_watts=float(hi) if hi is not None else base.max_watts,
        wpps_support=bool(wpps) if wpps is not None else base.wpps_support,
    )


def _entry(
    model: str,
    *,
    node: tuple[float, float],
    gpu: tuple[int, float, float, bool],
    cpu: tuple[int, float, float],
    modules: int = 0,
    idle: Mapping[str, float] | None = None,
) -> SystemSpec:
    return SystemSpec(
        model=model,
        plugin="redfish",
        node=ComponentSpec(1, node[0], node[1]),
        gpu=ComponentSpec(gpu[0], gpu[1], gpu[2], wpps_support=gpu[3]),
        cpu=ComponentSpec(cpu[0], cpu[1], cpu[2]),
        processor_modules=modules,
        idle_policy=policy_from_element_map("idle", {k: {"watts": v} for k, v in idle.items()})
        if idle
        else None,
    )


#: Known models. DGX_GB200 is the published DPS spec; the others are estimates from the platform
#: documentation (B200 GPU 200..1000 W per its BMC's AllowableMin/Max) and may be overridden by the
#: device model JSON, which always wins.
CATALOGUE: dict[str, SystemSpec] = {
    "DGX_GB200": _entry(
        "DGX_GB200",
        node=(1000, 6667),
        gpu=(4, 200, 1200, True),
        cpu=(2, 50, 420),
        modules=2,
        idle={"Node": 1000, "GPU": 800, "CPU": 100},
    ),
    "DGX_GB300": _entry(
        "DGX_GB300",
        node=(1000, 7200),
        gpu=(4, 200, 1400, True),
        cpu=(2, 50, 420),
        modules=2,
        idle={"Node": 1000, "GPU": 800, "CPU": 100},
    ),
    "DGX_B200EM": _entry("DGX_B200EM", node=(5600, 14300), gpu=(8, 200, 1000, True), cpu=(2, 100, 350)),
    "DGX_B300EM": _entry("DGX_B300EM", node=(5600, 14500), gpu=(8, 200, 1100, True), cpu=(2, 100, 350)),
    "DGX_H100": _entry("DGX_H100", node=(5600, 10200), gpu=(8, 200, 700, False), cpu=(2, 100, 350)),
}
