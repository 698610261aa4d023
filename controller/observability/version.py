"""The installed devicectl's version: one answer for `--version`, the agent's handshake and the
build-info metric."""

from __future__ import annotations

from functools import cache


@cache
def installed_version() -> str:
    """The installed distribution's version ("unknown" when run from a tree never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("devicectl")
    except PackageNotFoundError:
        return "unknown"
