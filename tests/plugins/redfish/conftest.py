"""Fixtures for the Redfish plugin tests: simulated BMCs over real HTTPS and a started plugin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet, ensure_tls_files
from plugins.redfish import RedfishPlugin, RedfishSettings
from tests.plugins.redfish.harness import Harness


@pytest.fixture(scope="session")
def sim_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CA and server certificate for the whole session."""
    directory = tmp_path_factory.mktemp("redfish-plugin-tls")
    ensure_tls_files(directory)
    return directory


@pytest.fixture
def make_harness(sim_certs: Path) -> Callable[..., Any]:
    """Factory: `async with make_harness(n=..., model=...) as h:` a started fleet and plugin."""

    class _Ctx:
        def __init__(self, settings: RedfishSettings | None = None, **fleet_args: Any) -> None:
            self.fleet = SimulatorFleet(cert_dir=sim_certs, **fleet_args)
            self.plugin = RedfishPlugin(settings)

        async def __aenter__(self) -> Harness:
            await self.fleet.start()
            await self.plugin.start()
            return Harness(self.fleet, self.plugin)

        async def __aexit__(self, exc_type: object, *exc: object) -> None:
            try:
                await self.plugin.close()
                if exc_type is None:  # every test also checks that no Redfish session leaked
                    leaked = {b.url: b.stats.open_sessions for b in self.fleet.bmcs if b.stats.open_sessions}
                    assert not leaked, f"Redfish sessions left open after close(): {leaked}"
            finally:
                await self.fleet.stop()

    return _Ctx


@pytest.fixture
async def gb200(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    """One GB200 BMC and a plugin."""
    async with make_harness(n=1, model="gb200") as harness:
        yield harness


@pytest.fixture
async def mixed(make_harness: Callable[..., Any]) -> AsyncIterator[Harness]:
    """Four BMCs, one of each model: gb200, dmtf, dmtf-legacy, dgx-h100."""
    async with make_harness(n=4, model=["gb200", "dmtf", "dmtf-legacy", "dgx-h100"]) as harness:
        yield harness
