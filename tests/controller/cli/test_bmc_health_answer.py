"""A `bmc_health` answer (DPS's BMCHealthDeviceRequest) shows its checks: `devicectl send --wait`
and `devicectl requests show` print each check with its status and detail, not only "ok". The CLI
runs as its own process against a controller on a real port driving a simulated GB200 BMC."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.controller.cli.test_in_force import gb200_site
from tests.controller.terminal import pipe


async def test_send_and_requests_show_print_every_readiness_check(
    tmp_path: Path, sink: Any, start_controller: Any
) -> None:
    request = tmp_path / "bmc_health.json"
    request.write_text(
        json.dumps({"device": "node001", "bmcHealth": {"skipWrites": True, "samplesPerTelemetry": 2}})
    )
    async with gb200_site(tmp_path, sink, start_controller) as site:

        async def cli(*args: str) -> Any:
            done = await asyncio.to_thread(pipe, *site.cli(*args))
            assert done.code == 0, done.out + done.err
            return done

        sent = await cli("send", "file", "--file", str(request), "--request-id", "health-1", "--wait")
        shown = await cli("requests", "show", "health-1")
        for out in (sent.out, shown.out):
            assert "readiness checks:" in out, out
            rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}
            assert rows.get("tls") in ("pass", "warn", "fail"), out  # the check, with its status
            assert rows.get("latency") in ("pass", "warn", "fail"), out
