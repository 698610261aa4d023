"""What an operator sees at a terminal and a script reads from a pipe: a dry run that cannot be
taken for an applied change, `--gpu N=none` that removes a cap, tables that fit, JSON for scripts,
and exit codes. Each command runs as its own process, in an 80-column pseudo-terminal and in a pipe,
against a controller on a real port driving simulated GB200 BMCs over HTTPS."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller.inventory import load_inventory
from controller.sink import TopologySink
from plugins.redfish.simulator import SimulatedBmc, SimulatorFleet
from tests.ops._terminal import both, fits, pipe


@dataclass
class Site:
    server: str
    bmc: SimulatedBmc
    harness: Any
    sink: TopologySink

    def cli(self, *args: str) -> tuple[str, ...]:
        return ("--server", self.server, *args)


@pytest.fixture
async def site(tmp_path: Path, sink: TopologySink, start_controller: Any) -> AsyncIterator[Site]:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets))
        yield Site(f"127.0.0.1:{h.controller.port}", fleet.bmcs[0], h, sink)
        await h.controller.stop()  # before the fleet goes: it logs out of the BMC


def gpu_set_point(bmc: SimulatedBmc, gpu: int) -> float | None:
    return bmc.state.set_points().get(f"GPU_{gpu}")


# ---- dry run ---------------------------------------------------------------------------------------


async def test_a_dry_run_prints_only_the_plan_under_a_nothing_written_heading(site: Site) -> None:
    before = site.bmc.state.set_points()
    terminal, piped = await both(
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--dry-run")
    )
    for run in (terminal, piped):
        assert run.code == 0, run.out + run.err
        assert run.lines[0].startswith("DRY RUN: nothing was written."), run.out
        assert "would make 1 write" in run.lines[0]
        # the plan, and nothing that reads like a result: no "ok", no result/power table
        assert "planned" not in run.out or "send" in run.out
        assert ": ok" not in run.out and "RESULT" not in run.out and " ok " not in run.out, run.out
        assert "SetPoint" in run.out and "450" in run.out
    fits(terminal)
    assert site.bmc.stats.writes_applied == 0 and site.bmc.state.set_points() == before

    run = await asyncio.to_thread(
        pipe,
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--dry-run", "-o", "json"),
    )
    plan = json.loads(run.out)
    assert (plan["dry_run"], plan["outcome"], plan["written"]) == (True, "planned", 0)
    assert "ok" not in plan and "response" not in plan
    assert [w["status"] for w in plan["writes"]] == ["planned"]


async def test_a_dry_run_that_would_fail_says_so(site: Site) -> None:
    run = await asyncio.to_thread(
        pipe,
        *site.cli(
            "send", "gpu-policies", "--device", "node001", "--gpu", "0=5000", "--dry-run", "-o", "json"
        ),
    )
    assert run.code == 1
    plan = json.loads(run.out)
    assert plan["outcome"] == "would_fail" and "above the maximum" in plan["error"]
    assert "applied 0 W" not in run.out and "not applied" in plan["error"]
    run = await asyncio.to_thread(
        pipe, *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=5000", "--dry-run")
    )
    assert run.code == 1 and run.out.startswith("DRY RUN: nothing was written.")
    assert "the request would fail: GPU 0: 5000 W is above the maximum" in run.err


# ---- --gpu N=none ----------------------------------------------------------------------------------


async def test_gpu_none_removes_the_cap_with_receipts(site: Site) -> None:
    original = gpu_set_point(site.bmc, 0)
    cap = site.bmc.state.caps["GPU_1"]
    cap.set_point, cap.oob_active = 600, True  # an out-of-band cap devicectl never recorded
    run = await asyncio.to_thread(
        pipe, *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "0=450", "--wait")
    )
    assert run.code == 0 and gpu_set_point(site.bmc, 0) == 450, run.out + run.err
    writes = site.bmc.stats.writes_applied
    terminal, piped = await both(
        *site.cli(
            "send", "gpu-policies", "--device", "node001", "--gpu", "0=none", "--gpu", "1=none",
            "--request-id", "none-1", "--wait",
        )
    )  # fmt: skip
    assert terminal.code == 0, terminal.out
    fits(terminal)
    # before: `gpu_policies_update: {}`, ok, no write, and the GPU kept its cap
    assert gpu_set_point(site.bmc, 0) == original
    assert site.bmc.state.caps["GPU_1"].set_point != 600, terminal.out
    assert site.bmc.stats.writes_applied == writes + 2
    for gpu in ("GPU 0", "GPU 1"):
        assert any(line.startswith(gpu) and " ok " in line for line in terminal.lines), terminal.out
    assert "cap removed" in terminal.out
    shown = await asyncio.to_thread(pipe, *site.cli("requests", "show", "none-1"))
    receipts = [
        line
        for line in shown.lines
        if line.startswith(("GPU 0 ", "GPU 1 ")) and ("PATCH" in line or "POST" in line)
    ]
    assert len(receipts) == 2, shown.out
    # second time: nothing left to remove, and it says so instead of a bare ok
    piped = await asyncio.to_thread(
        pipe,
        *site.cli("send", "gpu-policies", "--device", "node001", "--gpu", "1=none", "--wait", "-o", "json"),
    )
    result = json.loads(piped.out)["response"]["gpu_policies_update"]["results"]
    assert result[0]["ok"] and "no cap to remove" in result[0]["diag_msg"], piped.out
    assert site.bmc.stats.writes_applied == writes + 2
