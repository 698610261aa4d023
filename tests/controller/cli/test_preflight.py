"""`devicectl inventory check [--login]` against real simulated BMCs over HTTPS."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from bmcsim import SimulatorFleet
from controller.cli import main
from tests.plugins.redfish.conftest import sim_certs

__all__ = ["sim_certs"]


def _wrong_passwords(secrets: Path) -> None:
    for secret in secrets.iterdir():
        data = json.loads(secret.read_text())
        secret.write_text(json.dumps({**data, "password": "wrong"}))


def _break_offline(secrets: Path, inventory: Path) -> None:
    for secret in secrets.iterdir():
        secret.unlink()
    text = re.sub(r'ca_bundle = "[^"]*"', 'ca_bundle = "/nonexistent/ca.pem"', inventory.read_text(), count=1)
    inventory.write_text(text)


async def _check(capsys, *args: str) -> tuple[int, dict]:
    code = await asyncio.to_thread(main, ["--json", "inventory", "check", *args])
    captured = capsys.readouterr()
    assert captured.out.startswith("{"), captured.err
    return code, json.loads(captured.out)


async def test_check_and_login(tmp_path: Path, sim_certs: Path, capsys) -> None:
    fleet = SimulatorFleet(cert_dir=sim_certs, n=2, model="gb200")
    await fleet.start()
    try:
        inventory = tmp_path / "inventory.toml"
        secrets = fleet.write_inventory(inventory, tmp_path / "secrets")
        code, out = await _check(
            capsys, "--inventory", str(inventory), "--secrets-dir", str(secrets), "--login"
        )
        assert code == 0 and out["ok"], out
        assert [d["login"].startswith("ok") for d in out["devices"]] == [True, True]

        # wrong credentials: offline checks pass, the login names the failure, exit 1
        _wrong_passwords(Path(secrets))
        code, out = await _check(
            capsys, "--inventory", str(inventory), "--secrets-dir", str(secrets), "--login"
        )
        assert code == 1 and not out["ok"]
        assert all(d["problems"] == [] and d["login"].startswith("FAILED") for d in out["devices"])
        assert "wrong" not in json.dumps(out)  # never a secret in the output

        # offline: a missing secret and an unreadable CA file are named per device, no login tried
        _break_offline(Path(secrets), inventory)
        code, out = await _check(
            capsys, "--inventory", str(inventory), "--secrets-dir", str(secrets), "--login"
        )
        assert code == 1
        first = out["devices"][0]
        assert any("CA bundle /nonexistent/ca.pem is not readable" in p for p in first["problems"])
        assert any("secret" in p for p in first["problems"]) and first["login"] == ""
    finally:
        await fleet.stop()


async def test_table_output_and_unknown_plugin(tmp_path: Path, capsys) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text('[[device]]\nid = "n1"\nplugin = "nosuch"\n')
    code = await asyncio.to_thread(main, ["inventory", "check", "--inventory", str(inventory)])
    out = capsys.readouterr().out
    assert code == 1
    assert (
        "problems found" in out
        and "n1" in out
        and "unknown plugin 'nosuch'" in out.replace("\n", " ").replace("│", "")
    )
