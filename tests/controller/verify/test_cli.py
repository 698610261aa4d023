"""`devicectl verify` against a real controller and the HTTPS simulator: a table or JSON, progress
while it waits, the history (`verify list`, `verify show`), and the exit code an operator scripts on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bmcsim import SimulatorFleet
from controller.cli import main
from controller.inventory import load_inventory

FAST = ["--telemetry-interval-ms", "20", "--latency-samples", "5"]


async def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def test_verify_waits_with_progress_and_shows_every_check(
    tmp_path: Path, start_controller: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        server = ("--server", f"127.0.0.1:{h.controller.port}")

        code, out, err = await _cli(capsys, *server, "verify", "--all", *FAST, "-o", "json")
        assert code == 0, err
        found = json.loads(out)
        assert [(c["device"], c["status"], c["verdict"]) for c in found] == [
            ("node001", "done", "pass"),
            ("node002", "done", "pass"),
        ]
        assert {c["name"] for c in found[0]["result"]["checks"]} >= {
            "tls",
            "latency",
            "cap gpu/0",
            "telemetry",
        }

        code, out, err = await _cli(capsys, *server, "verify", "node001", *FAST, "--write-cycle")
        assert code == 0, err
        assert "1/1 done (1 pass)" in err  # the progress line
        assert "write gpu/3" in out and "device writes" in out  # every check, then the receipts
        check_id = out.split("\n")[2].split()[0]

        code, out, err = await _cli(capsys, *server, "verify", "list", "--device", "node001")
        assert code == 0 and out.count("node001") == 2, out
        code, out, err = await _cli(capsys, *server, "verify", "show", check_id, "-o", "json")
        assert code == 0 and json.loads(out)[0]["write_cycle"] is True

        code, out, err = await _cli(capsys, *server, "verify", "node001", "--force")
        assert code == 2 and "--force applies to --write-cycle only" in err
        code, out, err = await _cli(capsys, *server, "verify", "node404")
        assert code == 2 and "unknown device(s): node404" in err
        code, out, err = await _cli(capsys, *server, "verify", "show", "nosuch")
        assert code == 1 and "no verification matches 'nosuch'" in err

        fleet.bmcs[1].faults.set("reset")  # an unreachable BMC fails its verification: exit 1
        code, out, err = await _cli(capsys, *server, "verify", "node002", *FAST)
        fleet.bmcs[1].faults.clear()
        assert code == 1 and "reachability: fail" in out
