"""`bench.prober`: the fan-out benchmark's ack probes, sent from a process of their own."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bench import prober
from bench.ack_priority import noop_controller
from bench.util import ROOT, child_env
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb

R = pb.DeviceControllerRequest


def _pings(n: int) -> list[pb.DeviceControllerRequest]:
    return [
        R(device=f"dev{i % 2}", request_id=f"probe-{i}", ping=R.PingRequest(retry_count=1)) for i in range(n)
    ]


def test_the_requests_file_keeps_every_request(tmp_path: Path) -> None:
    requests = _pings(5)
    prober.write_requests(tmp_path / "r.bin", requests)
    assert prober.read_requests(tmp_path / "r.bin") == requests


def test_its_output_gives_the_waits_and_counts_the_failures() -> None:
    assert prober.parse_lines(["1.5", "fail UNAVAILABLE", "", "2.25\n"]) == ([1.5, 2.25], 1)


async def test_it_probes_a_controller_until_its_stdin_closes(tmp_path: Path) -> None:
    controller = noop_controller(tmp_path, 2, "prober-test")
    port = await controller.start()
    try:
        prober.write_requests(tmp_path / "r.bin", _pings(3))
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.prober",
            f"127.0.0.1:{port}",
            str(tmp_path / "r.bin"),
            "--interval",
            "0.01",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env=child_env(),
        )
        assert process.stdout is not None and process.stdin is not None
        first = await asyncio.wait_for(process.stdout.readline(), 60)  # one ack came back
        process.stdin.close()
        rest, _ = await asyncio.wait_for(process.communicate(), 60)
        waits, failures = prober.parse_lines([first.decode(), *rest.decode().splitlines()])
        assert process.returncode == 0
        assert failures == 0 and len(waits) >= 1 and all(w > 0 for w in waits)
        # the first probe is the first request (the next ones go round the others), journaled
        assert await controller.store.get_request("probe-0") is not None
    finally:
        await controller.stop(grace=1.0)
