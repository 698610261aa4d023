"""The server address in every form an operator writes it, and output read in a terminal and a pipe:
whole response lines, one-line schema errors, JSON with `-o json`, readable energy and delivery."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from bench.ports import free_port as _closed_port  # nothing listens there
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.cli import main
from controller.cli._channel import server_address
from controller.cli._responses import energy, render_response
from controller.delivery.sink import TopologySink
from tests.controller.conftest import memory_inventory
from tests.controller.observability.test_metrics import gpu_caps
from tests.controller.terminal import both, pipe

R = pb.DeviceControllerResponse


async def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
async def controller(start_controller: Any) -> tuple[Any, str]:
    h = await start_controller(memory_inventory(1))
    return h, f"127.0.0.1:{h.controller.port}"


async def test_send_file_does_not_call_itself_deprecated(tmp_path: Path, capsys) -> None:
    path = tmp_path / "req.json"
    path.write_text(json.dumps({"device": "d", "requestId": "f-1", "ping": {}}))
    code, _, err = await run(
        capsys, "--server", f"127.0.0.1:{_closed_port()}", "send", "file", "--file", str(path)
    )
    assert code == 1 and "controller not running" in err
    assert "warning" not in err and "deprecated" not in err  # it used to suggest itself
    code, _, err = await run(
        capsys, "--server", f"127.0.0.1:{_closed_port()}", "send", "ping", "--file", str(path)
    )
    assert "deprecated" in err and "send file --file F" in err  # the old form still warns


@pytest.mark.parametrize(
    ("given", "target", "tls"),
    [
        ("10.0.0.5:50051", "10.0.0.5:50051", False),
        ("controller.example", "controller.example:50051", False),  # grpc alone dials 443
        ("http://127.0.0.1:7000", "127.0.0.1:7000", False),
        ("https://dc.example:8443/", "dc.example:8443", True),
        ("[::1]", "[::1]:50051", False),
        ("::1", "[::1]:50051", False),
    ],
)
def test_server_address_forms(given: str, target: str, tls: bool) -> None:
    assert server_address(given) == (target, tls)


async def test_server_as_url_and_without_port(controller, sink: TopologySink, capsys) -> None:
    _, server = controller
    code, out, err = await run(capsys, "--server", f"http://{server}", "status")
    assert code == 0, err  # it used to say "not a loopback address"
    assert "not a loopback" not in err and "journal" in out
    code, _, err = await run(capsys, "--server", "127.0.0.1", "status")
    assert code == 1 and "127.0.0.1:50051" in err and ":443" not in err
    code, _, err = await run(capsys, "--server", "ftp://x:1", "status")
    assert code == 2 and "give HOST:PORT" in err
    # pointing at the topology sink: say it is not the controller, not "UNIMPLEMENTED: Method not found!"
    code, _, err = await run(capsys, "--server", sink.address, "status")
    assert code == 1 and f"{sink.address} is not a devicectl controller" in err
    assert "Method not found" not in err


async def test_db_prune_help_says_zero_keeps_forever(capsys) -> None:
    code, out, _ = await run(capsys, "db", "prune", "--help")
    assert code == 0
    assert "0 does not delete everything: it keeps that kind forever" in " ".join(out.split())
    assert "retention_journal_days (0: keep forever)" in " ".join(out.split())


async def test_delivered_request_shows_its_delivery_and_devices_show_the_read_back(
    controller, sink, capsys
) -> None:
    h, server = controller
    await h.stub.SendDeviceRequest(gpu_caps("node000", "p-1", {0: 480}))
    await sink.wait_for({"p-1"}, timeout=15)

    async def delivered() -> str:
        while True:
            _, out, _ = await run(capsys, "--server", server, "requests", "show", "p-1")
            if "delivery attempts  1" in out:
                return out
            await asyncio.sleep(0.1)

    out = await asyncio.wait_for(delivered(), 15)  # it said "delivery attempts 0" once delivered
    code, out, _ = await run(capsys, "--server", server, "devices", "show", "node000")
    assert code == 0 and "not read yet" not in out
    assert "480 W (read back when set)" in out


def test_energy_is_readable() -> None:
    assert energy(3.96004e7, "Joules") == "11.0 kWh"  # not "3.96004e+07 Joules"
    assert energy(1.8e6, "Joules") == "0.500 kWh"
    assert energy(120.0, "Joules") == "120 Joules"
    gpu = {
        "id": "0",
        "power_usage": 380,
        "set_limit": 500,
        "energy_usage": 3.96004e7,
        "energy_usage_unit": "Joules",
    }
    response = json_format.ParseDict(
        {"device": "n1", "request_id": "r", "std_metrics": {"metrics": {"num_gpus": 1, "gpus": [gpu]}}}, R()
    )
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        render_response(response)
    assert "11.0 kWh" in buffer.getvalue() and "e+07" not in buffer.getvalue()


async def test_version_and_bmc_sim_print_json_with_o_json(tmp_path: Path) -> None:
    for args in (("--version", "-o", "json"), ("-o", "json", "--version")):
        run = await asyncio.to_thread(pipe, *args)
        assert run.code == 0 and json.loads(run.out)["name"] == "devicectl", run.out  # it printed text
    run = await asyncio.to_thread(
        pipe,
        "bmc-sim",
        "-o",
        "json",
        "--count",
        "1",
        "--duration",
        "0.2",
        "--cert-dir",
        str(tmp_path / "tls"),
    )
    events = [json.loads(line) for line in run.out.splitlines()]  # every line is JSON
    assert [e["event"] for e in events] == ["ready", "stopped"] and events[0]["bmcs"] == 1
    assert events[0]["urls"][0].startswith("https://127.0.0.1:")


async def test_papercut_output_in_a_terminal_and_a_pipe(controller) -> None:
    _, server = controller
    terminal, piped = await both("--server", f"http://{server}", "requests", "list", "--status", "failed")
    for run in (terminal, piped):
        assert run.code == 0 and "not a loopback" not in run.out + run.err, run.out + run.err
        assert "request_id" in run.out


async def test_the_schema_error_is_one_line_at_80_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    args = ("serve", "--database-url", url, "--listen", "127.0.0.1:0", "--log-level", "ERROR")
    terminal, piped = await both(*args)
    for run in (terminal, piped):
        assert run.code == 2, run.out + run.err
        lines = [line for line in (run.out + run.err).splitlines() if line.strip()]
        # it used to wrap over three lines at 80 columns
        assert len(lines) == 1 and lines[0].startswith("error: database schema is at empty"), lines
        assert lines[0].endswith("(or start with --auto-upgrade)")


async def test_a_response_line_is_never_broken_in_a_pipe(controller) -> None:
    _, server = controller
    rid = "a-request-id-long-enough-to-push-the-summary-line-past-eighty-columns"
    run = await asyncio.to_thread(
        pipe, "--server", server, "send", "gpu-policies", "--device", "node000", "--gpu", "0=480",
        "--request-id", rid, "--wait",
    )  # fmt: skip
    assert run.code == 0, run.err
    assert f"node000 gpu_policies_update request_id={rid}: ok" in run.lines  # one line, not two
