"""Shadow mode (DPS 0.11): a real `devicectl serve --shadow` on SQLite drives a simulated GB200 BMC over
HTTPS. Requests are planned, recorded and answered; the simulator sees no write; reads stay live;
`status`, the metrics and every receipt say shadow."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatedBmc, SimulatorFleet
from controller.delivery.sink import TopologySink
from controller.execution import shadow
from plugins.base import Allocation, DeviceWrite, Ping, RequestKind, WriteLog, WriteRefusedError, recording
from tests.controller.terminal import pipe
from tests.memory_plugin import MemoryPlugin
from tests.serve_process import ROOT, free_port, start_serving


@dataclass
class Shadowed:
    server: str
    metrics: str
    bmc: SimulatedBmc
    sink: TopologySink

    def cli(self, *args: str) -> Any:
        return pipe("--server", self.server, *args)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, sink: TopologySink, *flags: str) -> AsyncIterator[Shadowed]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        port, metrics = free_port(), free_port()
        args = [
            sys.executable, "-m", "controller", "serve",
            "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", f"127.0.0.1:{metrics}",
            "--database-url", f"sqlite:///{tmp_path}/devicectl.db",
            "--callback", sink.address,
            "--inventory", str(inventory),
            "--secrets-dir", str(secrets),
            "--auto-upgrade",
            *flags,
        ]  # fmt: skip
        proc = await start_serving(
            args, {**os.environ, "PYTHONPATH": str(ROOT)}, tmp_path / "serve.log", port, 300
        )
        try:
            yield Shadowed(f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics", fleet.bmcs[0], sink)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return str(reply.read().decode())


def _writes_sent(bmc: SimulatedBmc) -> dict[tuple[str, str], int]:
    """The simulator's log of writes: every PATCH/POST other than a login."""
    return {
        key: n
        for key, n in bmc.stats.calls.items()
        if key[0] in ("PATCH", "POST", "PUT") and not key[1].startswith("/redfish/v1/SessionService")
    }


async def test_shadow_mode_plans_records_and_answers_without_writing(
    tmp_path: Path, sink: TopologySink
) -> None:
    async with serving(tmp_path, sink, "--shadow") as site:
        before = site.bmc.state.set_points()
        sent = await asyncio.to_thread(
            site.cli,
            "send", "rg-activate", "--device", "node001", "--resource-group", "rg1", "--node", "5000",
            "--cpu", "600", "--gpu", "0=900", "--request-id", "shadow-1", "--wait",
        )  # fmt: skip
        assert sent.code == 0, sent.out + sent.err
        assert "shadow" in sent.out.lower(), sent.out

        # the simulator saw no write, and nothing changed on it
        assert site.bmc.stats.writes_applied == 0
        assert _writes_sent(site.bmc) == {}
        assert site.bmc.state.set_points() == before

        # the topology server got its response, a success: acknowledged without changing limits
        await sink.wait_for({"shadow-1"}, timeout=30)
        response = sink.unique()["shadow-1"]
        assert response.resource_group_activate.success, response

        # recorded: the request with its would-be writes, every receipt marked shadow
        shown = await asyncio.to_thread(site.cli, "requests", "show", "shadow-1", "-o", "json")
        assert shown.code == 0, shown.err
        record = json.loads(shown.out)
        writes = record["writes"]
        assert writes, record
        assert {w["status"] for w in writes} <= {"shadow", "skipped"} and any(
            w["status"] == "shadow" for w in writes
        )
        assert all("not sent (shadow mode)" in w["note"] for w in writes if w["status"] == "shadow")
        assert all("afterWatts" not in w and "after_watts" not in w for w in writes)  # never a read-back
        assert shadow.ACKNOWLEDGED in record["error"]
        table = await asyncio.to_thread(site.cli, "requests", "show", "shadow-1")
        assert "shadow: acknowledged, nothing written" in table.out, table.out
        rows = [line.split() for line in table.out.splitlines()]
        results = {r[0]: r[1] for r in rows if r and r[0] in ("node", "cpu")}
        assert results == {"node": "shadow", "cpu": "shadow"}, table.out  # never "ok" for a plan
        assert "5000 W not written" in table.out

        # nothing is recorded as in force: the device's caps are not the plan's
        shown = await asyncio.to_thread(site.cli, "devices", "show", "node001", "-o", "json")
        components = json.loads(shown.out).get("in_force", {}).get("components", [])
        assert not [c for c in components if c.get("requested") in (5000, 600, 900)], components

        # status says shadow (text and JSON)
        status = await asyncio.to_thread(site.cli, "status")
        assert "SHADOW" in status.out, status.out
        status_json = await asyncio.to_thread(site.cli, "status", "-o", "json")
        assert json.loads(status_json.out)["shadow"] is True

        # reads stay live: metrics are read from the BMC
        gets = sum(n for (method, _), n in site.bmc.stats.calls.items() if method == "GET")
        metrics = await asyncio.to_thread(
            site.cli, "send", "std-metrics", "--device", "node001", "--request-id", "read-1", "--wait"
        )
        assert metrics.code == 0, metrics.out + metrics.err
        assert sum(n for (method, _), n in site.bmc.stats.calls.items() if method == "GET") > gets
        await sink.wait_for({"read-1"}, timeout=30)
        std = sink.unique()["read-1"].std_metrics
        assert std.success and std.HasField("metrics"), std
        assert _writes_sent(site.bmc) == {}

        scrape = await asyncio.to_thread(_scrape, site.metrics)
        assert "devicectl_shadow_mode 1.0" in scrape

        # a readiness check's write cycle is not run; its read-only checks are
        cycle = await asyncio.to_thread(site.cli, "verify", "node001", "--write-cycle", "-o", "json")
        checks = json.loads(cycle.out)
        checks = checks.get("checks", checks) if isinstance(checks, dict) else checks
        assert checks and all("shadow mode: the write cycle was not run" in c["error"] for c in checks), (
            cycle.out
        )
        assert site.bmc.stats.writes_applied == 0 and _writes_sent(site.bmc) == {}


async def test_a_live_controller_says_live_and_writes(tmp_path: Path, sink: TopologySink) -> None:
    async with serving(tmp_path, sink) as site:
        sent = await asyncio.to_thread(
            site.cli,
            "send",
            "gpu-policies",
            "--device",
            "node001",
            "--gpu",
            "0=480",
            "--request-id",
            "live-1",
            "--wait",
        )
        assert sent.code == 0, sent.out + sent.err
        assert site.bmc.stats.writes_applied >= 1 and site.bmc.state.set_points().get("GPU_0") == 480
        status = json.loads((await asyncio.to_thread(site.cli, "status", "-o", "json")).out)
        assert not status.get("shadow")
        assert "devicectl_shadow_mode 0.0" in await asyncio.to_thread(_scrape, site.metrics)


# ---- the choke point --------------------------------------------------------------------------------


def test_the_write_log_refuses_a_write_that_forgot_to_plan() -> None:
    sent: list[str] = []
    log = WriteLog(dry_run=True)
    with pytest.raises(WriteRefusedError, match="nothing was sent"), log.write("/x", "PATCH", {"watts": 1}):
        sent.append("sent")  # the body is the send: it must never run
    assert sent == [] and log.entries() == ()


def test_shadow_receipts_never_read_like_applied_changes() -> None:
    planned = DeviceWrite(
        "/x", "PATCH", {"watts": 500}, "GPU 0", 700.0, None, "planned", 0.0, "allowed 100..900 W"
    )
    marked = shadow.shadow_receipts([planned])
    assert marked[0].status == "shadow" and marked[0].note.startswith("not sent (shadow mode)")
    assert shadow.violation(marked) == ""
    leaked = DeviceWrite("/x", "PATCH", {"watts": 500}, "GPU 0", 700.0, 500.0, "200")
    assert "shadow mode violated" in shadow.violation(shadow.shadow_receipts([leaked]))


def test_a_plugin_that_cannot_plan_is_not_called_for_writes() -> None:
    plugin = MemoryPlugin()
    assert not plugin.supports_dry_run
    assert "cannot plan without writing" in shadow.refusal(
        RequestKind.RESOURCE_GROUP_ACTIVATE, Allocation(resource_group="rg"), plugin, "memory"
    )
    assert shadow.refusal(RequestKind.PING, Ping(), plugin, "memory") == ""


def test_the_redfish_client_refuses_writes_in_a_dry_run() -> None:
    from plugins.base.receipts import refuse_in_dry_run

    with recording(WriteLog(dry_run=True)), pytest.raises(WriteRefusedError):
        refuse_in_dry_run("PATCH", "/redfish/v1/Chassis/1/Controls/Cap")
    with recording(WriteLog()):
        refuse_in_dry_run("PATCH", "/redfish/v1/Chassis/1/Controls/Cap")  # live: passes
