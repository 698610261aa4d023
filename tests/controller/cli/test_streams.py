"""`devicectl fingerprint` and `devicectl stats` read the plugins' streams against real (simulated) BMCs."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from bmcsim import SimulatorFleet

ROOT = Path(__file__).resolve().parents[3]


async def devicectl(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller",
        *args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_fingerprint_and_stats_list_the_fleet(tmp_path: Path) -> None:
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        common = ("--inventory", str(tmp_path / "inventory.toml"), "--secrets-dir", str(tmp_path / "secrets"))
        code, out = await devicectl("--json", "fingerprint", *common)
        assert code == 0, out
        groups = [g for response in json.loads(out) for g in response["groups"]]
        devices = {d["id"]: d for g in groups for d in g["devices"]}
        assert {"node001", "node002"} <= set(devices)
        assert sum(1 for d in devices if d.startswith("node001/gpu/")) == 4
        assert all(d["healthy"] for d in devices.values())
        code, out = await devicectl("--json", "stats", *common, "--samples", "1")
        assert code == 0, out
        stats = [g for response in json.loads(out) for g in response["groups"]]
        instances = {name for g in stats for name in g["instance_stats"]}
        assert {"node001", "node002", "node001/gpu/0"} <= instances
        assert sum(b.stats.open_sessions for b in fleet.bmcs) == 0, "the CLI must log out of every BMC"
