"""Ack latency while the execution loop is busy, at a given GIL switch interval.

`python -m bench.ack_priority --switch-interval 0.005,0.001` starts one controller in this process
(SQLite, no-op devices, no callback) and keeps its execution loop busy with pure-Python work (many
ready tasks, each a fraction of a millisecond, as a wave's BMC replies keep it), while a client in
another process sends ping requests one at a time and times each ack. The gRPC server runs on a
loop of its own thread (controller/api/front_door.py), so what an ack waits for is the GIL: the
busy thread hands it over after at most the switch interval (`controller.process.runtime`).

Printed per interval (intervals alternate over `--rounds`): ack p50/p90/p99/max in ms, and the
busy loop's work done per second with its CPU per unit (the execution's side of the cost).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.processes import NOOP_PLUGIN
from bench.util import ROOT, say
from controller.app import Controller
from controller.config import Settings
from controller.inventory import DeviceEntry

#: the client: sends `count` pings one at a time to the port, prints the acks' percentiles
CLIENT = r"""
import sys, time
import grpc
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
R = pb.DeviceControllerRequest
port, count, devices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stub = dgrpc.DeviceControllerStub(grpc.insecure_channel("127.0.0.1:" + port))
stub.SendDeviceRequest(R(device="dev0", request_id="warm", ping=R.PingRequest(retry_count=1)))
ms = []
for i in range(count):
    request = R(device="dev%d" % (i % devices), request_id="p%d" % i, ping=R.PingRequest(retry_count=1))
    sent = time.monotonic()
    stub.SendDeviceRequest(request, timeout=30)
    ms.append((time.monotonic() - sent) * 1000)
    time.sleep(0.02)
ms.sort()
at = lambda q: ms[min(len(ms) - 1, int(len(ms) * q))]
print("%.1f %.1f %.1f %.1f" % (at(0.5), at(0.9), at(0.99), ms[-1]))
"""

#: ready tasks kept busy on the execution loop, and the Python work of one step of each
BUSY_TASKS = 200
STEP_ITERATIONS = 2500


async def _busy(stop: asyncio.Event, done: list[int]) -> None:
    async def task() -> None:
        while not stop.is_set():
            total = 0
            for i in range(STEP_ITERATIONS):
                total += i * i
            done[0] += 1
            await asyncio.sleep(0)

    await asyncio.gather(*(task() for _ in range(BUSY_TASKS)))


def noop_controller(workdir: Path, devices: int, instance_id: str) -> Controller:
    """A controller in this process on SQLite in `workdir`, serving `devices` no-op devices
    (dev0, dev1, ...) on a free loopback port, with no topology callback."""
    inventory = {f"dev{i}": DeviceEntry(f"dev{i}", NOOP_PLUGIN, {}) for i in range(devices)}
    settings = Settings(
        listen="127.0.0.1:0",
        database_url=f"sqlite:///{workdir / 'journal.db'}",
        callback="",
        auto_upgrade=True,
        instance_id=instance_id,
    )
    return Controller(settings, inventory)


async def run_once(interval: float, count: int, devices: int) -> str:
    sys.setswitchinterval(interval)
    with tempfile.TemporaryDirectory(prefix="ack-priority-") as workdir:
        controller = noop_controller(Path(workdir), devices, "ack-priority")
        port = await controller.start()
        stop, done = asyncio.Event(), [0]
        busy = asyncio.create_task(_busy(stop, done))
        try:
            started, cpu = time.monotonic(), time.process_time()
            client = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", CLIENT, str(port), str(count), str(devices)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=600,
            )
            wall, cpu = time.monotonic() - started, time.process_time() - cpu
        finally:
            stop.set()
            await busy
            await controller.stop(grace=1.0)
    if client.returncode != 0:
        return f"client failed: {client.stderr.strip().splitlines()[-1:]}"
    p50, p90, p99, top = client.stdout.split()
    units = max(done[0], 1)
    return (
        f"ack p50 {p50} p90 {p90} p99 {p99} max {top} ms; busy loop {units / wall:,.0f} steps/s, "
        f"{cpu / units * 1e6:.0f} us CPU per step (this process)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ack_priority", description=__doc__.splitlines()[0])
    parser.add_argument("--switch-interval", default="0.005,0.001", help="seconds, comma list")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--acks", type=int, default=300, help="pings per run")
    parser.add_argument("--devices", type=int, default=4)
    args = parser.parse_args(argv)
    intervals = [float(v) for v in args.switch_interval.split(",")]
    for round_ in range(1, args.rounds + 1):
        for interval in intervals:
            result = asyncio.run(run_once(interval, args.acks, args.devices))
            say(f"round {round_}, switch interval {interval:g} s: {result}")


if __name__ == "__main__":
    main()
