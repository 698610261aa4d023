"""Registry of the simulated BMC models."""

from __future__ import annotations

from plugins.redfish.simulator import _dgx_h100, _dmtf, _gb200, _replay
from plugins.redfish.simulator._routing import Platform

PLATFORMS: dict[str, Platform] = {
    p.name: p for p in (_gb200.PLATFORM, _dmtf.PLATFORM, _dmtf.LEGACY_PLATFORM, _dgx_h100.PLATFORM)
}

#: model names accepted by `SimulatorFleet(model=...)` and `--model`
MODELS: tuple[str, ...] = tuple(PLATFORMS)


def get_platform(model: str) -> Platform:
    """The platform for a model: "gb200", "dmtf", "dmtf-legacy", "dgx-h100", "capture:DIR", "mockup:DIR"."""
    if _replay.is_replay(model):
        return _replay.load_platform(model)
    try:
        return PLATFORMS[model]
    except KeyError:
        raise ValueError(f"unknown BMC model {model!r}; choose from {', '.join(MODELS)}") from None
