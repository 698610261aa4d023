"""PostgreSQL behind a network that went silent (a partition, a dropped route: no reset comes
back): a query on the store's connection fails within about a minute (libpq's `tcp_user_timeout`
and keepalives, `controller.store._database.POSTGRES_TCP`), instead of waiting out the kernel's
retransmissions (about 15 minutes) on the writer thread, so the store's outage handling starts.

The silence is real: the store runs in a network namespace of its own, joined to this one by a
veth pair, and reaches the server through a TCP proxy on this side; taking this side's end down
drops every packet without a word back. Needs root and `ip` (iproute2); CI has them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import sys

import pytest
from sqlalchemy.engine import URL

from controller.store._database import (
    KEEPALIVE,
    POSTGRES_TCP,
    create_engines,
    create_migration_engine,
    create_outcome_engine,
)
from drills.proxy import TcpProxy
from tests.serve_process import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

#: the store's side, run in the namespace: one query, a line to wait on, one more query
CLIENT = """
import sys
from sqlalchemy.engine import make_url
from controller.store._database import create_engines
writer, _ = create_engines(make_url(sys.argv[1]))
with writer.connect() as conn:
    conn.exec_driver_sql("SELECT 1")
    print("connected", flush=True)
    sys.stdin.readline()  # the network is silent from here on
    try:
        conn.exec_driver_sql("SELECT 1")
        print("answered", flush=True)
    except Exception as exc:
        print("failed", type(exc).__name__, flush=True)
"""


def _need_network_tools() -> None:
    reason = None if shutil.which("ip") else "`ip` not found (Debian's iproute2)"
    if reason is None and os.geteuid() != 0:
        reason = "network namespaces need root"
    if reason is not None:
        message = f"a silent network cannot be made here: {reason}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}. CI must run this test.", pytrace=False)
        pytest.skip(message)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


async def test_a_query_on_a_silent_network_fails_in_about_a_minute(pg_database: URL) -> None:
    _need_network_tools()
    tag = secrets.token_hex(3)
    namespace, here, there = f"dctl-{tag}", f"dcv{tag}a", f"dcv{tag}b"
    subnet = f"198.18.{secrets.randbelow(250) + 1}"  # RFC 2544: for tests, in no real network
    proxy: TcpProxy | None = None
    client: asyncio.subprocess.Process | None = None
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", namespace)
        _ip("addr", "add", f"{subnet}.1/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", namespace, "addr", "add", f"{subnet}.2/30", "dev", there)
        _ip("-n", namespace, "link", "set", there, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        proxy = TcpProxy(pg_database.host or "127.0.0.1", pg_database.port or 5432, listen_host=f"{subnet}.1")
        await proxy.open()
        url = pg_database.set(host=f"{subnet}.1", port=proxy.port).render_as_string(hide_password=False)
        client = await asyncio.create_subprocess_exec(
            *("ip", "netns", "exec", namespace, sys.executable, "-c", CLIENT, url),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert client.stdin is not None and client.stdout is not None
        first = await asyncio.wait_for(client.stdout.readline(), 60)
        assert first.decode().strip() == "connected", first

        _ip("link", "set", here, "down")  # no carrier: its packets are dropped, nothing answers
        client.stdin.write(b"go\n")
        await client.stdin.drain()
        # the kernel alone would retry for about 15 minutes; the settings say about one
        limit = POSTGRES_TCP["tcp_user_timeout"] / 1000 + POSTGRES_TCP["connect_timeout"] + 240
        then = await asyncio.wait_for(client.stdout.readline(), limit)
        assert then.decode().split()[:2] == ["failed", "OperationalError"], then
    finally:
        if client is not None and client.returncode is None:
            client.kill()
            await client.wait()
        if proxy is not None:
            await proxy.close()
        with contextlib.suppress(subprocess.SubprocessError):
            _ip("netns", "del", namespace)  # its end of the pair goes with it, and so does ours


def test_every_store_connection_asks_the_server_for_the_same_keepalive(pg_database: URL) -> None:
    """The other end: the server gives up on a store that vanished (its node died) mid-transaction
    in about a minute, releasing its row locks, not after its default of two hours and more."""
    writer, reader = create_engines(pg_database)
    outcomes = create_outcome_engine(pg_database)
    try:
        for engine in (writer, reader, outcomes, create_migration_engine(pg_database)):
            assert engine is not None
            with engine.connect() as conn:
                shown = [
                    conn.exec_driver_sql(f"SHOW tcp_keepalives_{name}").scalar_one()
                    for name in ("idle", "interval", "count")
                ]
            assert [int(str(v).rstrip("s")) for v in shown] == list(KEEPALIVE), shown
            engine.dispose()
    finally:
        writer.dispose()
        reader.dispose()
