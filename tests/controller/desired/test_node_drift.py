"""Every cap devicectl can read is drift-checked, the node cap and its modules included: after a
BMC reset (every cap back to its default, Automatic) `devicectl devices limits` shows the node,
module, CPU and GPU rows drifted, each total agreeing with its members; `devicectl` runs as its own
process against a controller on a real port driving a simulated GB200 BMC over HTTPS."""

from __future__ import annotations

import asyncio
import csv
import io
from pathlib import Path
from typing import Any

from bmcsim import SimulatorFleet
from bmcsim._gb200_writes import clear_write
from controller.inventory import load_inventory
from tests.controller.desired.test_drift import eventually
from tests.controller.terminal import pipe


def limits_rows(out: str) -> dict[str, dict[str, str]]:
    """`devices limits -o csv`, by component."""
    return {r["component"]: r for r in csv.DictReader(io.StringIO(out))}


async def test_a_bmc_reset_shows_node_module_cpu_and_gpu_rows_drifted(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(
            load_inventory(tmp_path / "inventory.toml"), secrets_dir=str(secrets), drift_interval=3600.0
        )
        server = ("--server", f"127.0.0.1:{h.controller.port}")

        async def cli(*args: str) -> Any:
            done = await asyncio.to_thread(pipe, *server, *args)
            assert done.code == 0, done.out + done.err
            return done

        await cli(
            "send", "rg-activate", "--device", "node001", "--resource-group", "rg1",
            "--node", "4800", "--cpu", "500", "--gpu", "0=900", "--wait",
        )  # fmt: skip
        bmc = fleet.bmcs[0]
        before = {name: cap.set_point for name, cap in bmc.state.caps.items()}
        assert 900 in before.values()

        check = await h.controller.drift.check("node001")
        assert check is not None and check.drifted == {}, check
        rows = limits_rows((await cli("devices", "limits", "-o", "csv")).out)
        assert rows["node"]["requested"] == "4800" and rows["node"]["drift"] == "ok", rows
        assert rows["cpu"]["drift"] == "ok" and rows["gpu/0"]["drift"] == "ok", rows
        modules = [c for c in rows if c.startswith("module/")]
        assert modules and all(rows[m]["drift"] == "ok" for m in modules), rows

        for cap in bmc.state.caps.values():  # a BMC reset: every cap back to its default, Automatic
            clear_write(cap).apply()
        check = await h.controller.drift.check("node001")
        assert check is not None and {"node", "cpu", "gpu/0"} <= set(check.drifted), check
        assert "desired 4800 W" in check.drifted["node"] and "module/0" in check.drifted["node"]
        rows = limits_rows((await cli("devices", "limits", "-o", "csv")).out)
        for component in ("node", "cpu", "gpu/0", *modules, "cpu/0", "cpu/1"):
            assert rows[component]["drift"] == "drifted", (component, rows)
        assert rows["node"]["enforced"] not in ("", "4800"), rows  # the reset's node cap, read back
        # a member never shows a value the check proved stale
        assert all(rows[m]["enforced"] == "" for m in (*modules, "cpu/0", "cpu/1")), rows
        await h.controller.stop()


async def test_a_reset_node_cap_is_reapplied_under_reapply(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(
            load_inventory(tmp_path / "inventory.toml"),
            secrets_dir=str(secrets),
            drift_interval=3600.0,
            drift_reapply="node*",
        )
        server = ("--server", f"127.0.0.1:{h.controller.port}")
        done = await asyncio.to_thread(
            pipe, *server, "send", "rg-activate", "--device", "node001", "--resource-group", "rg1",
            "--node", "4800", "--wait",
        )  # fmt: skip
        assert done.code == 0, done.out + done.err
        bmc = fleet.bmcs[0]
        capped = {name: cap.set_point for name, cap in bmc.state.caps.items() if cap.oob_active}
        assert capped, "the node cap landed on the modules"
        for cap in bmc.state.caps.values():
            clear_write(cap).apply()
        check = await h.controller.drift.check("node001")
        assert check is not None and "node" in check.drifted and check.action.startswith("reapply: "), check
        reapplied = check.action.removeprefix("reapply: ").split(", ")

        async def back() -> bool:
            return all(bmc.state.caps[name].set_point == watts for name, watts in capped.items())

        await eventually(back, "the node cap re-applied", timeout=60)
        record = await h.controller.store.get_request(reapplied[0])
        assert record is not None and record.kind == "resource_group_activate"
        await h.controller.stop()
