"""One-line errors (bad flags, files, databases, a controller not running, a wait timeout), output
flags anywhere on the line and JSON where a script reads it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench.ports import free_port as _closed_port  # nothing listens there
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.cli import main
from controller.cli._render import console
from controller.cli._responses import render_response
from tests.controller.conftest import memory_inventory
from tests.controller.observability.test_metrics import gpu_caps


async def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
async def controller(start_controller) -> Any:
    h = await start_controller(memory_inventory(1))
    return h, f"127.0.0.1:{h.controller.port}"


async def test_output_flags_anywhere(controller, sink, capsys) -> None:
    h, server = controller
    await h.stub.SendDeviceRequest(gpu_caps("node000", "o-1", {0: 500}))
    await sink.wait_for({"o-1"}, timeout=10)
    for flags in (["--json"], ["-o", "json"], ["--output=json"], ["-ojson"]):
        code, out, err = await run(capsys, "--server", server, "requests", "list", *flags)
        assert code == 0, err
        assert [r["request_id"] for r in json.loads(out)] == ["o-1"]
    code, out, _ = await run(capsys, "--server", server, "requests", "list", "-o", "table")
    assert code == 0 and "o-1" in out and not out.lstrip().startswith("[")
    code, out, _ = await run(capsys, "--server", server, "requests", "list", "-o", "yaml")
    assert code == 0 and out.startswith("- ") and 'request_id: "o-1"' in out
    code, _, err = await run(capsys, "status", "-o", "xml")
    assert code == 2 and "output format must be one of table, wide, json, yaml" in one_line_error(err)


async def test_json_for_db_upgrade_and_bmc_sim(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    code, out, _ = await run(capsys, "--json", "db", "upgrade", "--database-url", url)
    assert code == 0 and json.loads(out)["after"]
    code, out, err = await run(capsys, "--json", "bmc-sim", "--count", "1", "--duration", "0.1")
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gpu-policies", "--device", "d"], "send gpu-policies: give --gpu ID=WATTS"),
        (["rg-activate", "--device", "d", "--node", "900"], "send rg-activate: --resource-group is required"),
        (["ping", "--device", "d", "--gpu", "0=100"], "send ping: --gpu not used by this kind"),
        (
            ["gpu-policies", "--device", "d", "--gpu", "-1=500"],
            "--gpu -1=500: the GPU id must be a whole number",
        ),
        (["gpu-policies", "--device", "d", "--gpu", "0=lots"], "--gpu 0=lots: WATTS must be a number"),
    ],
)
async def test_send_checks_flags_per_kind(args: list[str], message: str, capsys) -> None:
    code, _, err = await run(capsys, "--server", f"127.0.0.1:{_closed_port()}", "send", *args)
    assert code == 2
    assert message in one_line_error(err)


async def test_send_bad_file_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "req.json"
    bad.write_text('{"device": "d", "no_such_field": 1}')
    code, _, err = await run(capsys, "send", "--file", str(bad))
    assert code == 2 and "not a DeviceControllerRequest in protobuf JSON" in one_line_error(err)
    code, _, err = await run(capsys, "send", "--file", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in one_line_error(err)


async def test_controller_not_running(capsys) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    for args in (["status"], ["requests", "list"], ["send", "ping", "--device", "d"]):
        code, _, err = await run(capsys, "--server", address, *args)
        assert code == 1
        assert one_line_error(err).startswith(f"error: controller not running at {address}")


async def test_wait_timeout_ends_with_one_line(start_controller, capsys) -> None:
    h = await start_controller(memory_inventory(1), callback=f"127.0.0.1:{_closed_port()}")
    server = f"127.0.0.1:{h.controller.port}"
    code, _, err = await run(
        capsys, "--server", server, "send", "ping", "--device", "node000", "--request-id", "w-1",
        "--wait", "--wait-delivery", "--wait-timeout", "1",
    )  # fmt: skip
    assert code == 1
    assert "request w-1 accepted but not delivered within 1 s" in one_line_error(err)


async def test_database_errors_are_one_line(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    code, _, err = await run(capsys, "db", "status", "--database-url", f"sqlite:///{missing}/x.db")
    assert code == 2 and "does not exist" in one_line_error(err)
    assert not missing.exists()  # no longer created silently
    code, _, err = await run(capsys, "db", "status", "--database-url", "not a url")
    assert code == 2 and one_line_error(err).startswith("error: ")
    url = f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test"
    code, _, err = await run(capsys, "db", "status", "--database-url", url)
    assert code == 1 and "cannot use the database" in one_line_error(err)


async def test_stats_and_fingerprint_fail_on_a_missing_secret(tmp_path: Path, capsys) -> None:
    inventory = tmp_path / "inventory.toml"
    inventory.write_text(
        '[[device]]\nid = "n1"\nplugin = "redfish"\nmodel = "DGX_GB200"\n'
        '[device.redfish]\nurl = "https://127.0.0.1:1"\nsecret = "nope"\n'
    )
    (tmp_path / "secrets").mkdir()
    for command in ("stats", "fingerprint"):
        code, _, err = await run(
            capsys, command, "--inventory", str(inventory), "--secrets-dir", str(tmp_path / "secrets")
        )
        assert code == 1, command
        assert "nope" in one_line_error(err)


async def test_tables_state_json_and_delivery_errors(start_controller, capsys, monkeypatch) -> None:
    h = await start_controller(memory_inventory(1), callback=f"127.0.0.1:{_closed_port()}")
    server = f"127.0.0.1:{h.controller.port}"
    rid = "0b4f2f7e-3c1d-4a53-9a43-5b7c9f1d2e6a"
    await h.stub.SendDeviceRequest(gpu_caps("node000", rid, {0: 480}))

    async def tried() -> dict[str, Any]:
        while True:
            _, out, _ = await run(capsys, "--server", server, "requests", "list", "--undelivered", "--json")
            rows = json.loads(out)
            if rows and rows[0].get("delivery_error"):
                return rows[0]
            await asyncio.sleep(0.1)

    await asyncio.wait_for(tried(), 15)
    monkeypatch.setattr(console, "width", 250)  # a wide terminal: no wrapping inside cells
    code, out, _ = await run(capsys, "--server", server, "requests", "list", "--undelivered")
    assert code == 0 and "delivery error" in out and "UNAVAILABLE" in out
    assert "0b4f2f7e" in out and rid not in out  # short id in the table
    code, out, _ = await run(capsys, "--server", server, "requests", "list", "--undelivered", "--wide")
    assert rid in out.replace("\n", "")
    code, out, _ = await run(capsys, "--server", server, "requests", "show", "0b4f2f7e")  # a unique prefix
    assert code == 0 and "node000" in out
    code, out, _ = await run(capsys, "--server", server, "devices", "show", "node000", "--json")
    state = json.loads(out)["state_json"]
    assert isinstance(state, dict) and state["gpus"]["0"] == 480  # JSON, not base64


def test_failed_cap_is_not_shown_as_zero_watts(capsys) -> None:
    R = pb.DeviceControllerResponse
    response = R(
        device="n1",
        request_id="r",
        gpu_policies_update=R.GPUPoliciesUpdateResponse(
            results=[R.GPUPolicyResult(gpu_id=0, ok=False, power_cap_watts=0, diag_msg="over the maximum")]
        ),
    )
    render_response(response)
    out = capsys.readouterr().out
    assert "not applied" in out and "0 W" not in out


def test_a_failed_cap_says_what_its_write_did(capsys) -> None:
    R = pb.DeviceControllerResponse
    results = [
        R.GPUPolicyResult(gpu_id=0, ok=True, power_cap_watts=600, diag_msg="written"),
        R.GPUPolicyResult(gpu_id=1, ok=False, power_cap_watts=700, diag_msg="not written; GPU 1: HTTP 500"),
        R.GPUPolicyResult(
            gpu_id=2,
            ok=False,
            power_cap_watts=0,
            diag_msg="unknown (the BMC's answer never came); GPU 2: no reply",
        ),
        R.GPUPolicyResult(gpu_id=3, ok=False, power_cap_watts=580, diag_msg="written; GPU 3: reads 580 W"),
    ]
    response = R(
        device="n1", request_id="r", gpu_policies_update=R.GPUPoliciesUpdateResponse(results=results)
    )
    render_response(response)
    out = capsys.readouterr().out
    assert "not written (700 W in force)" in out and "unknown: no answer" in out
    assert "580 W written" in out and "not applied" not in out


async def test_version(capsys) -> None:
    assert main(["--version"]) == 0  # returned, never raised as SystemExit
    assert capsys.readouterr().out.startswith("devicectl ")
