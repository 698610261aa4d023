"""Registry of the simulated BMC models."""

from __future__ import annotations

from pathlib import Path

from bmcsim import _dmtf, _gb200, _replay
from bmcsim._routing import Platform

PLATFORMS: dict[str, Platform] = {p.name: p for p in (_gb200.PLATFORM, _dmtf.PLATFORM, _dmtf.LEGACY_PLATFORM)}

#: NVIDIA platforms as mockup data (bmcsim/mockups, provenance in each SOURCES.md), served by the
#: replay engine: what that firmware serves, not what a hand-written model guesses
MOCKUPS: dict[str, str] = {
    "gb200-nvl": "nvidia-gb200-nvl",
    "gb200-nvl-gpu-caps": "nvidia-gb200-nvl-gpu-caps",
    "gh200": "nvidia-gh200",
    "dgx-h100": "nvidia-dgx-h100",
    "dgx-h100-gpu-caps": "nvidia-dgx-h100-gpu-caps",
    "hgx-h100": "nvidia-hgx-h100",
    "hgx-b200": "nvidia-hgx-b200",
}
MOCKUP_DIR = Path(__file__).resolve().parent / "mockups"

#: model names accepted by `SimulatorFleet(model=...)` and `--model`
MODELS: tuple[str, ...] = (*PLATFORMS, *MOCKUPS)

#: real BMC layouts: captures of real firmware in the source tree's corpus (tests/corpus/redfish,
#: provenance in each SOURCES), served as `mockup:DIR` with the vendors' write behaviour
REAL_LAYOUTS: dict[str, str] = {
    "gb300-nvl": "nvidia-gb300-nvl",
    "cray-ex235a": "cray-ex235a",
    "cray-ex425": "cray-ex425",
    "ilo5-dl325": "hpe-dl325-gen10plus",
    "ilo5-apollo6500": "hpe-xl675d-a100",
    "ami-h262": "gigabyte-ami",
    "openbmc": "openbmc-stock",
}
CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "redfish"


def real_layout(model: str) -> str:
    """`mockup:DIR` for a real layout's name; ValueError outside a source checkout."""
    directory = CORPUS / REAL_LAYOUTS[model]
    if not (directory / "index.json").is_file():
        raise ValueError(
            f"BMC model {model!r} serves a capture from the source tree, not found at {directory}"
        )
    return f"mockup:{directory}"


def get_platform(model: str) -> Platform:
    """The platform for a model: "gb200", "dmtf", "dmtf-legacy", an NVIDIA mockup (`MOCKUPS`), a real layout
    (`REAL_LAYOUTS`), "capture:DIR", "mockup:DIR"."""
    if _replay.is_replay(model):
        return _replay.load_platform(model)
    if model in REAL_LAYOUTS:
        return _replay.load_platform(real_layout(model))
    if model in MOCKUPS:
        return _replay.load_platform(f"mockup:{MOCKUP_DIR / MOCKUPS[model]}")
    try:
        return PLATFORMS[model]
    except KeyError:
        known = ", ".join((*MODELS, *REAL_LAYOUTS))
        raise ValueError(f"unknown BMC model {model!r}; choose from {known}") from None
