"""Crash recovery: a controller killed with SIGKILL between ack and completion answers after restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from tests.serve_process import ROOT, free_port, start_serving

R = pb.DeviceControllerRequest


class ServeProcess:
    def __init__(self, tmp: Path, db_url: str, callback: str) -> None:
        self.port = free_port()
        inventory = tmp / "inventory.toml"
        inventory.write_text(
            '[[device]]\nid = "node000"\nplugin = "tests.memory_plugin:MemoryPlugin"\n'
            'model = { Model = "DGX_GB200", delay = 2.0 }\n'
        )
        self.args = [
            sys.executable,
            "-m",
            "controller",
            "serve",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--database-url",
            db_url,
            "--callback",
            callback,
            "--inventory",
            str(inventory),
            "--instance-id",
            "crash-test",
            "--auto-upgrade",
        ]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log = tmp / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.proc = await start_serving(self.args, self.env, self.log, self.port, tries=150)

    async def send(self, request: pb.DeviceControllerRequest) -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            await dgrpc.DeviceControllerStub(channel).SendDeviceRequest(request, timeout=10)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def serve(tmp_path: Path, db_url: str, sink) -> Iterator[ServeProcess]:  # type: ignore[no-untyped-def]
    process = ServeProcess(tmp_path, db_url, sink.address)
    yield process
    process.terminate()


async def test_sigkill_between_ack_and_completion_answers_once_after_restart(serve, sink) -> None:
    await serve.start()
    await serve.send(R(device="node000", request_id="k1", ping=R.PingRequest()))
    await serve.send(R(device="node000", request_id="k2", ping=R.PingRequest()))
    await asyncio.sleep(0.5)
    serve.kill()
    assert not sink.responses, "the device takes 2 s: nothing can have completed before the kill"
    await serve.start()
    await sink.wait_for({"k1", "k2"}, timeout=20)
    await asyncio.sleep(0.5)
    assert sink.counts["k1"] == 1 and sink.counts["k2"] == 1
    assert [r.request_id for r in sink.responses] == ["k1", "k2"], "per-device order survives the restart"
    assert all(r.ping.success for r in sink.responses)


async def test_request_whose_deadline_passed_during_the_outage_gets_an_explicit_error(serve, sink) -> None:
    await serve.start()
    await serve.send(R(device="node000", request_id="late", timeout_seconds=1, ping=R.PingRequest()))
    await asyncio.sleep(0.2)
    serve.kill()
    await asyncio.sleep(1.2)
    await serve.start()
    await sink.wait_for({"late"}, timeout=15)
    response = sink.unique()["late"]
    assert not response.ping.success and "deadline passed" in response.ping.error
    assert sink.counts["late"] == 1
