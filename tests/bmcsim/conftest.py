"""Fixtures for the BMC simulator tests: one CA per test session, verified HTTPS clients."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bmcsim import SimulatedBmc, SimulatorFleet, ensure_tls_files

# the plugin's harness, for the capture tests that compare the plugin's results on an original and its replay
from tests.plugins.redfish.conftest import make_harness as make_harness
from tests.plugins.redfish.conftest import sim_certs as sim_certs


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and server certificate shared by every test (generated once)."""
    directory = tmp_path_factory.mktemp("bmc-sim-tls")
    ensure_tls_files(directory)
    return directory


@pytest.fixture
def ssl_ctx(cert_dir: Path) -> ssl.SSLContext:
    """Client context verifying the simulator against the written `ca.pem`."""
    return ssl.create_default_context(cafile=str(cert_dir / "ca.pem"))


@pytest.fixture
async def http(ssl_ctx: ssl.SSLContext) -> AsyncIterator[aiohttp.ClientSession]:
    """A verifying aiohttp session."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx)) as session:
        yield session


@dataclass
class Reply:
    """A finished HTTP exchange."""

    status: int
    headers: Any
    body: Any


class Api:
    """Minimal Redfish client for tests: Basic auth unless a token is given."""

    def __init__(self, http: aiohttp.ClientSession, bmc: SimulatedBmc) -> None:
        self.http = http
        self.bmc = bmc
        self.token: str | None = None

    def auth_headers(self) -> dict[str, str]:
        if self.token:
            return {"X-Auth-Token": self.token}
        raw = f"{self.bmc.username}:{self.bmc.password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        deadline_s: float = 10.0,
    ) -> Reply:
        all_headers = {**(self.auth_headers() if auth else {}), **(headers or {})}
        async with self.http.request(
            method,
            self.bmc.url + path,
            json=body,
            headers=all_headers,
            timeout=aiohttp.ClientTimeout(total=deadline_s),
        ) as resp:
            text = await resp.text()
            try:
                parsed = await resp.json(content_type=None) if text else None
            except ValueError:
                parsed = text
            return Reply(resp.status, resp.headers, parsed)

    async def get(self, path: str, **kw: Any) -> Reply:
        return await self.call("GET", path, **kw)

    async def patch(self, path: str, body: Any, **kw: Any) -> Reply:
        return await self.call("PATCH", path, body, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> Reply:
        return await self.call("POST", path, body, **kw)

    async def login(self) -> Reply:
        reply = await self.post(
            "/redfish/v1/SessionService/Sessions",
            {"UserName": self.bmc.username, "Password": self.bmc.password},
            auth=False,
        )
        if reply.status == 201:
            self.token = reply.headers["X-Auth-Token"]
        return reply


@pytest.fixture
def api(http: aiohttp.ClientSession) -> Callable[[SimulatedBmc], Api]:
    """Factory: a test client bound to one simulated BMC."""
    return lambda bmc: Api(http, bmc)


@pytest.fixture
async def gb200(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    """One GB200 BMC."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=cert_dir) as fleet:
        yield fleet.bmcs[0]


@pytest.fixture
async def dmtf(cert_dir: Path) -> AsyncIterator[SimulatedBmc]:
    """One generic DMTF BMC (Controls + legacy Power)."""
    async with SimulatorFleet(n=1, model="dmtf", cert_dir=cert_dir) as fleet:
        yield fleet.bmcs[0]
