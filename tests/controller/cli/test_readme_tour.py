"""The README's five-minute tour, command by command, as a new operator types it: every client
command it shows runs and exits 0 against a controller driving simulated GB200 BMCs, and says what
the README says it does."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from bmcsim import SimulatorFleet
from controller.delivery.sink import TopologySink
from controller.inventory import load_inventory
from tests.controller.terminal import ROOT, pipe

#: commands the test runs itself (in process), not through the shell line the README gives
_SERVERS = ("bmc-sim", "topology-sink", "db upgrade", "serve")


def tour() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## A five-minute tour", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    commands = []
    for line in lines:
        command = line.split("#", 1)[0].strip().rstrip("&").strip()
        if command.startswith("devicectl "):
            commands.append(" ".join(command.split()))
    return commands


def test_the_tour_covers_what_the_readme_promises() -> None:
    commands = tour()
    assert any("--dry-run" in c for c in commands) and any("=none" in c for c in commands)
    assert any(c.startswith(f"devicectl {s}") for c in commands for s in _SERVERS)


async def test_every_tour_command_runs(
    tmp_path: Path, sink: TopologySink, start_controller: Any, monkeypatch: Any
) -> None:
    async with SimulatorFleet(n=4, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        h = await start_controller(load_inventory(inventory), secrets_dir=str(secrets))
        env = {"DEVICECTL_SERVER": f"127.0.0.1:{h.controller.port}"}
        last_id = ""
        for command in tour():
            if any(command.startswith(f"devicectl {s}") for s in _SERVERS):
                continue
            command = command.replace("var/sim/inventory.toml", str(inventory))
            command = command.replace("var/sim/secrets", str(secrets)).replace("<id>", last_id)
            run = await asyncio.to_thread(pipe, *command.split()[1:], env=env)
            assert run.code == 0, f"{command}\n{run.out}\n{run.err}"
            assert "Traceback" not in run.err, command
            if command.startswith("devicectl send"):  # an answer, never the bare `KIND: {}` of old
                assert not re.search(r": \{\}$", run.out, re.M), run.out
            found = re.search(r"request_id=([0-9a-f-]{36})", run.out)
            last_id = found.group(1) if found else last_id
            if "--dry-run" in command:
                assert run.out.startswith("DRY RUN: nothing was written."), run.out
                assert ": ok" not in run.out
            if "=none" in command:
                gpu = re.search(r"--gpu (\d+)=none", command)
                assert gpu is not None
                assert re.search(rf"^GPU {gpu.group(1)}\s+ok\s", run.out, re.M), run.out
        await h.controller.stop()  # before the fleet goes: it logs out of the BMCs
