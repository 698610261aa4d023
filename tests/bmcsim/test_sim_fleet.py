"""Fleet lifecycle at scale, fixed port ranges, and the out-of-process control endpoint."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bmcsim import BmcConfig, SimulatorFleet

GPU0 = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_0/EnvironmentMetrics"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _free_base_port(count: int) -> int:
    for _ in range(50):
        base = random.randint(20000, 60000 - count)
        probes = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                probes.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in probes:
                sock.close()
    raise RuntimeError("no free port range")


@pytest.mark.slow
async def test_fleet_of_200_starts_serves_and_stops_cleanly(cert_dir: Path, ssl_ctx: ssl.SSLContext) -> None:
    before = _open_fds()
    models = ["gb200", "dmtf", "dmtf-legacy", "dgx-h100"]
    fleet = SimulatorFleet(n=200, model=models, cert_dir=cert_dir)
    async with fleet:
        ports = {b.port for b in fleet.bmcs}
        assert len(ports) == 200
        # each BMC listens on its own socket of this process (counting all fds would also count
        # whatever earlier tests on this worker left for the garbage collector to close meanwhile)
        assert _listening_on(ports) == ports
        connector = aiohttp.TCPConnector(ssl=ssl_ctx, limit=64)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def product(url: str) -> str:
                async with http.get(url + "/redfish/v1/") as resp:
                    assert resp.status == 200
                    return str((await resp.json())["Product"])

            products = await asyncio.gather(*(product(b.url) for b in fleet.bmcs))
        assert products[0] == "GB200 NVL" and products[3] == "DGXH100"
        assert sum(b.stats.total_calls for b in fleet.bmcs) == 200
        assert fleet.stats()["totals"]["total_calls"] == 200
        assert [b.model for b in fleet.bmcs[:4]] == [
            "DGX_GB200",
            "GENERIC_DMTF",
            "GENERIC_DMTF_LEGACY",
            "DGX_H100",
        ]
    # every listening socket and connection is gone
    await asyncio.sleep(0)
    assert _open_fds() <= before + 2


def _listening_on(ports: set[int]) -> set[int]:
    """Which of `ports` this process has a listening TCP socket on."""
    inodes = _socket_inodes()
    lines = Path("/proc/self/net/tcp").read_text().splitlines()[1:]
    return {
        port
        for f in map(str.split, lines)
        if f[9] in inodes and f[3] == "0A" and (port := int(f[1].split(":")[1], 16)) in ports
    }


def _socket_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            inodes.add(os.readlink(f"/proc/self/fd/{fd}").removeprefix("socket:[").removesuffix("]"))
        except OSError:
            continue
    return inodes


def _sockets_on(port: int) -> int:
    """This process's TCP sockets whose local port is `port` (a BMC's side of its connections)."""
    inodes = _socket_inodes()
    lines = Path("/proc/self/net/tcp").read_text().splitlines()[1:]
    return sum(1 for f in map(str.split, lines) if f[9] in inodes and int(f[1].split(":")[1], 16) == port)


async def test_stop_closes_every_connection_before_returning(cert_dir: Path, ssl_ctx: ssl.SSLContext) -> None:
    # A client that holds a TLS connection and never answers the BMC's close_notify: a graceful TLS
    # close waits for it (up to the 5 s shutdown timeout) and Python 3.11's Server.wait_closed() does
    # not wait for connections at all, so stop() used to return with the BMC's socket still open.
    fleet = SimulatorFleet(n=1, cert_dir=cert_dir)
    client: ssl.SSLSocket | None = None
    try:
        async with fleet:
            port = fleet.bmcs[0].port

            def handshake() -> ssl.SSLSocket:
                raw = socket.create_connection(("127.0.0.1", port))
                return ssl_ctx.wrap_socket(raw, server_hostname="127.0.0.1")

            client = await asyncio.to_thread(handshake)
            for _ in range(200):  # bounded wait for the BMC to see the connection
                if fleet.bmcs[0].stats.open_connections:
                    break
                await asyncio.sleep(0.01)
            assert _sockets_on(port) == 2  # the listening socket and the BMC's side of the connection
        assert _sockets_on(port) == 0, "stop() returned with a connection still open"
    finally:
        if client is not None:
            client.close()


async def test_base_port_and_per_bmc_configs(cert_dir: Path, ssl_ctx: ssl.SSLContext) -> None:
    base = _free_base_port(3)
    configs = [
        BmcConfig(model="gb200", password="one"),
        BmcConfig(model="dmtf", username="root", password="two", session_limit=1),
        BmcConfig(model="gb200", latency=0.05, firmware_version="GB200Nvl-25.02-1"),
    ]
    async with SimulatorFleet(configs=configs, base_port=base, cert_dir=cert_dir) as fleet:
        assert [b.port for b in fleet.bmcs] == [base, base + 1, base + 2]
        assert fleet.urls[1] == f"https://127.0.0.1:{base + 1}"
        assert (fleet.bmc(1).username, fleet.bmc(1).password) == ("root", "two")
        assert fleet.bmc(1).sessions.limit == 1
        assert fleet.bmc(2).firmware_version == "GB200Nvl-25.02-1"
        auth = _basic("root", "two")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx)) as http:
            async with http.get(fleet.bmc(1).url + "/redfish/v1/Chassis/1/Controls", headers=auth) as resp:
                assert resp.status == 200


async def test_port_clash_fails_cleanly(cert_dir: Path) -> None:
    async with SimulatorFleet(n=1, cert_dir=cert_dir) as first:
        clash = SimulatorFleet(n=2, base_port=first.bmcs[0].port, cert_dir=cert_dir)
        with pytest.raises(OSError):
            await clash.start()
        assert all(b._server is None for b in clash.bmcs)


def test_unknown_model_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown BMC model"):
        SimulatorFleet(n=1, model="cray")


async def test_temporary_cert_dir_is_removed() -> None:
    fleet = SimulatorFleet(n=1)
    async with fleet:
        ca = fleet.ca_bundle
        assert ca.exists()
    assert not ca.exists()


async def test_control_endpoint(cert_dir: Path, ssl_ctx: ssl.SSLContext) -> None:
    async with (
        SimulatorFleet(n=3, cert_dir=cert_dir, control_port=0) as fleet,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx)) as http,
    ):
        ctl = fleet.control_url
        assert ctl is not None and ctl.startswith("http://127.0.0.1:")

        async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
            async with http.request(method, ctl + path, json=body) as resp:
                return resp.status, await resp.json()

        bmc = fleet.bmc(1)
        auth = _basic(bmc.username, bmc.password)
        assert await call("GET", "/health") == (200, {"ok": True, "bmcs": 3})
        status, listed = await call("GET", "/bmcs")
        assert [b["url"] for b in listed] == fleet.urls
        assert all("password" not in b for b in listed)

        async with http.get(bmc.url + GPU0, headers=auth) as resp:
            assert resp.status == 200
        status, stats = await call("GET", "/bmcs/1/stats")
        assert stats["calls"][f"GET {GPU0.replace('GPU_0', '{id}')}"] == 1
        status, everything = await call("GET", "/stats")
        assert everything["totals"]["total_calls"] == 1 and len(everything["bmcs"]) == 3

        status, faults = await call(
            "PUT", "/bmcs/1/faults", {"mode": "http503", "retry_after": 3, "count": 1}
        )
        assert status == 200 and faults["mode"] == "http503"
        async with http.get(bmc.url + GPU0, headers=auth) as resp:
            assert resp.status == 503 and resp.headers["Retry-After"] == "3"
        async with http.get(bmc.url + GPU0, headers=auth) as resp:
            assert resp.status == 200
        assert (await call("PUT", "/faults", {"mode": "http500", "bmcs": [0, 2]}))[1]["bmcs"] == 2
        assert fleet.bmc(0).faults.mode == "http500" and fleet.bmc(1).faults.mode == "none"
        assert (await call("DELETE", "/faults"))[0] == 200
        assert fleet.bmc(0).faults.mode == "none"
        assert (await call("PUT", "/bmcs/1/faults", {"mode": "meteor"}))[0] == 400

        bmc.sessions.create()
        assert await call("POST", "/bmcs/1/sessions/expire") == (200, {"expired": 1})
        status, described = await call("PATCH", "/bmcs/1/config", {"latency": 0.01, "async_writes": True})
        assert described["latency"] == 0.01 and bmc.config.async_writes
        assert (await call("PATCH", "/config", {"latency": 0}))[1]["bmcs"] == 3
        assert (await call("PATCH", "/bmcs/1/config", {"colour": "red"}))[0] == 400

        status, state = await call("GET", "/bmcs/1/state")
        assert state["caps"]["GPU_0"]["set_point"] == 1200
        assert int(state["profiles"]["GPU_0"]["supported"], 16) > 0
        assert (await call("POST", "/stats/reset"))[0] == 200
        assert bmc.stats.total_calls == 0
        assert (await call("GET", "/bmcs/9/stats"))[0] == 404
