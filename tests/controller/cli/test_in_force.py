"""What is in force, per node and component, and the kubectl habits every list shares: each
command runs as its own process (a pipe, or an 80-column terminal) against a controller on a real
port driving a simulated GB200 BMC over HTTPS."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from controller.inventory import load_inventory
from tests.controller.cli.test_operator import Site
from tests.controller.terminal import both, pipe


@pytest.fixture
async def site(tmp_path: Path, sink: Any, start_controller: Any) -> AsyncIterator[Site]:
    async with gb200_site(tmp_path, sink, start_controller) as started:
        yield started


@contextlib.asynccontextmanager
async def gb200_site(tmp_path: Path, sink: Any, start_controller: Any) -> AsyncIterator[Site]:
    """A controller on a real port driving one simulated GB200 BMC over HTTPS."""
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets))
        yield Site(f"127.0.0.1:{h.controller.port}", fleet.bmcs[0], h, sink)
        await h.controller.stop()  # before the fleet goes: it logs out of the BMC


async def _cli(site: Site, *args: str) -> Any:
    return await asyncio.to_thread(pipe, *site.cli(*args))


async def test_devices_show_list_and_limits_say_what_is_in_force(site: Site) -> None:
    device = "node001"
    sent = await _cli(site, "send", "gpu-policies", "--device", device, "--gpu", "0=480", "--wait")
    assert sent.code == 0, sent.out + sent.err
    reading = site.bmc.state.set_points().get("GPU_0")
    assert reading == 480

    shown = await _cli(site, "devices", "show", device, "-o", "json")
    assert shown.code == 0, shown.err
    data = json.loads(shown.out)
    gpu0 = next(c for c in data["in_force"]["components"] if c["component"] == "gpu/0")
    assert gpu0["requested"] == 480 and gpu0["enforced"] == 480
    assert gpu0["min"] is not None and gpu0["max"] is not None and gpu0["min"] < 480 < gpu0["max"]
    assert gpu0["drift"] in ("not checked", "ok") and gpu0["changed_at"]

    table = await _cli(site, "devices", "show", device)
    rows = [line.split() for line in table.out.splitlines()]
    allowed = f"{gpu0['min']:.0f}..{gpu0['max']:.0f}"
    assert ["gpu/0", "480", "480", allowed] == rows[[r[:1] for r in rows].index(["gpu/0"])][:4], table.out
    assert "resource groups" in table.out

    wide = await _cli(site, "devices", "list", "-o", "wide")
    assert wide.code == 0 and "gpu/0 480/480" in wide.out, wide.out
    narrow = await _cli(site, "devices", "list")
    assert "gpu/0 480/480" not in narrow.out  # caps are a wide column

    limits = await _cli(site, "devices", "limits", "-o", "csv", "--no-headers")
    assert limits.code == 0, limits.err
    found = [r for r in csv.reader(io.StringIO(limits.out)) if r[:2] == [device, "gpu/0"]]
    assert found and found[0][2:6] == ["480", "480", f"{gpu0['min']:.0f}", f"{gpu0['max']:.0f}"], limits.out
    assert not limits.out.startswith("device,")  # --no-headers

    names = await _cli(site, "devices", "list", "-o", "name")
    assert names.out.splitlines() == [f"device/{device}"], names.out


async def test_lists_say_when_rows_were_cut_and_take_filters(site: Site) -> None:
    for i in range(3):
        sent = await _cli(
            site, "send", "ping", "--device", "node001", "--request-id", f"p-{i}", "--trace-id", f"t-{i % 2}"
        )
        assert sent.code == 0, sent.err
    cut = await _cli(site, "requests", "list", "--limit", "2", "-o", "name")
    assert cut.code == 0 and len(cut.out.splitlines()) == 2, cut.out
    assert cut.err.strip() == "showing the first 2 requests; more match: raise --limit or give --all"
    whole = await _cli(site, "requests", "list", "--limit", "3", "-o", "name")
    assert whole.err == "" and sorted(whole.out.splitlines()) == [f"request/p-{i}" for i in range(3)]
    every = await _cli(site, "requests", "list", "--all", "--limit", "1", "-o", "name")
    assert every.err == "" and len(every.out.splitlines()) == 3
    traced = await _cli(site, "requests", "list", "--trace-id", "t-1", "-o", "name")
    assert traced.out.splitlines() == ["request/p-1"], traced.out
    kinds = await _cli(site, "requests", "list", "--kind", "ping", "--no-headers", "-o", "csv")
    assert len(kinds.out.splitlines()) == 3 and "request_id" not in kinds.out
    none = await _cli(site, "requests", "list", "--kind", "power_on", "--no-headers")
    assert none.code == 0 and none.out == "" and none.err == ""
    recent = await _cli(site, "requests", "list", "--since", "10m", "-o", "name")
    assert len(recent.out.splitlines()) == 3
    await asyncio.sleep(1.2)
    old = await _cli(site, "requests", "list", "--since", "1s", "--limit", "1", "-o", "name")
    assert old.out == "" and old.err == ""  # older rows ended the list: nothing was cut
    bad = await _cli(site, "requests", "list", "--since", "yesterday")
    assert bad.code == 2 and "--since 'yesterday': give a duration" in bad.err
    several = await _cli(site, "requests", "list", "--device", "node001", "--device", "node000", "-o", "name")
    assert several.code == 0 and len(several.out.splitlines()) == 3  # both devices, not only the last


async def test_watch_prints_new_rows_as_they_come(site: Site) -> None:
    terminal, _ = await both(*site.cli("requests", "list", "--no-headers"))
    assert terminal.out.strip() == ""
    import subprocess
    import sys

    from tests.controller.terminal import ROOT, _env

    proc = subprocess.Popen(
        [sys.executable, "-m", "controller", *site.cli("requests", "list", "--watch", "-o", "json")],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await asyncio.sleep(3)  # it printed the (empty) list and watches
        sent = await _cli(site, "send", "ping", "--device", "node001", "--request-id", "w-1", "--wait")
        assert sent.code == 0, sent.err
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)  # type: ignore[union-attr]
        assert json.loads(line)["request_id"] == "w-1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_power_limit_watts_has_requested_enforced_min_and_max(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    from prometheus_client import REGISTRY

    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(
            load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets), metrics_per_device=True
        )
        try:
            server = f"127.0.0.1:{h.controller.port}"
            sent = await asyncio.to_thread(
                pipe,
                "--server",
                server,
                "send",
                "gpu-policies",
                "--device",
                "node001",
                "--gpu",
                "0=480",
                "--wait",
            )
            assert sent.code == 0, sent.err

            def value(kind: str) -> float | None:
                labels = {"device": "node001", "component": "gpu/0", "kind": kind}
                return REGISTRY.get_sample_value("devicectl_power_limit_watts", labels)

            # the GB200 simulator's GPUs allow 200..1200 W
            assert [value(k) for k in ("requested", "enforced", "min", "max")] == [480, 480, 200, 1200]
            shown = await asyncio.to_thread(
                pipe, "--server", server, "devices", "show", "node001", "-o", "json"
            )
            gpu0 = next(
                c for c in json.loads(shown.out)["in_force"]["components"] if c["component"] == "gpu/0"
            )
            assert (gpu0["min"], gpu0["max"]) == (200, 1200)  # the CLI and the metric agree
        finally:
            await h.controller.stop()
