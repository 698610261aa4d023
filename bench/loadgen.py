"""The load generator: a separate process sending `SendDeviceRequest` to a controller.

    python -m bench.loadgen --target 127.0.0.1:50051 --requests 10000 --rate 1000 --devices 1000

`--rate R` offers R requests per second on an open-loop schedule (request i is due at i/R seconds,
whether or not earlier ones were acknowledged); `--rate 0` sends as fast as the controller acks,
keeping `--concurrency` requests in flight. Each request is a ping for one of `--devices` devices,
round robin, with id `<id-prefix>-<n>`. Prints one JSON object: counts, timings on the
`time.monotonic()` clock (shared by every process on the machine), and ack latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import grpc

from bench.util import percentile
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc


def loadgen_command(
    target: str,
    requests: int,
    *,
    devices: int,
    id_prefix: str,
    warmup: int,
    rate: float | None = None,
    concurrency: int | None = None,
) -> list[str]:
    """The command line that runs this load generator as its own process (`--rate` and
    `--concurrency` left at their defaults when not given)."""
    command = [sys.executable, "-m", "bench.loadgen", "--target", target, "--requests", str(requests)]
    if rate is not None:
        command += ["--rate", str(rate)]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    command += ["--devices", str(devices), "--device-prefix", "bench"]
    return [*command, "--id-prefix", id_prefix, "--warmup", str(warmup)]


def request_ids(prefix: str, count: int) -> list[str]:
    """The request ids a run with this prefix and count sends (the benchmark expects these)."""
    return [f"{prefix}-{i:07d}" for i in range(count)]


def device_ids(prefix: str, count: int) -> list[str]:
    """The device ids requests are spread over (the inventory must hold them)."""
    return [f"{prefix}{i:05d}" for i in range(count)]


class _Run:
    def __init__(self, stub: dgrpc.DeviceControllerStub, timeout: float) -> None:
        self.stub = stub
        self.timeout = timeout
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        #: the first error message seen for each status code
        self.details: dict[str, str] = {}
        #: ids of the requests that were not acknowledged (the controller may never have seen them)
        self.failed: list[str] = []
        self.acked = 0
        self.last_ack = 0.0

    async def send(self, request: pb.DeviceControllerRequest) -> None:
        began = time.monotonic()
        try:
            await self.stub.SendDeviceRequest(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            self.errors[exc.code().name] += 1
            self.details.setdefault(exc.code().name, str(exc.details()))
            self.failed.append(request.request_id)
            return
        now = time.monotonic()
        self.latencies.append(now - began)
        self.acked += 1
        self.last_ack = max(self.last_ack, now)


async def _fixed_rate(run: _Run, requests: Sequence[pb.DeviceControllerRequest], rate: float) -> float:
    """Open loop: each tick starts every request that is due by now. Returns the worst lag (s)."""
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    worst_lag = 0.0
    i = 0
    while i < len(requests):
        now = time.monotonic()
        while i < len(requests) and start + i / rate <= now:
            worst_lag = max(worst_lag, now - (start + i / rate))
            task = asyncio.create_task(run.send(requests[i]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        if i < len(requests):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
    if tasks:
        await asyncio.gather(*tasks)
    return worst_lag


async def _max_rate(run: _Run, requests: Sequence[pb.DeviceControllerRequest], concurrency: int) -> None:
    """Closed loop: `concurrency` senders, each sending its next request as soon as one is acked."""
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:  # the shared iterator hands each request to exactly one worker
            await run.send(request)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def generate(args: argparse.Namespace) -> dict[str, Any]:
    """Run the load described by `args`; returns the JSON-friendly result."""
    devices = device_ids(args.device_prefix, args.devices)
    ids = request_ids(args.id_prefix, args.requests)
    requests = [
        pb.DeviceControllerRequest(
            device=devices[i % len(devices)], request_id=rid, ping=pb.DeviceControllerRequest.PingRequest()
        )
        for i, rid in enumerate(ids)
    ]
    warmup = [
        pb.DeviceControllerRequest(
            device=devices[i % len(devices)],
            request_id=rid,
            ping=pb.DeviceControllerRequest.PingRequest(),
        )
        for i, rid in enumerate(request_ids(args.id_prefix + "-warmup", args.warmup))
    ]
    async with grpc.aio.insecure_channel(args.target) as channel:
        stub = dgrpc.DeviceControllerStub(channel)
        await channel.channel_ready()
        # Warm-up (not measured): the connection, the controller's first journal batches.
        await _max_rate(_Run(stub, args.timeout), warmup, min(args.concurrency, 16))
        run = _Run(stub, args.timeout)
        cpu_before = time.process_time()
        started = time.monotonic()
        lag = 0.0
        if args.rate > 0:
            lag = await _fixed_rate(run, requests, args.rate)
        else:
            await _max_rate(run, requests, args.concurrency)
        finished = time.monotonic()
        cpu = time.process_time() - cpu_before
    elapsed = (run.last_ack or finished) - started
    return {
        "mode": "fixed" if args.rate > 0 else "max",
        "offered_rate": args.rate,
        "concurrency": args.concurrency if args.rate <= 0 else None,
        "warmup": args.warmup,
        "sent": len(requests),
        "acked": run.acked,
        "errors": dict(run.errors),
        "error_details": run.details,
        "failed_ids": run.failed,
        "started": started,
        "finished": finished,
        "last_ack": run.last_ack,
        "elapsed": elapsed,
        "acks_per_s": run.acked / elapsed if elapsed > 0 else 0.0,
        "send_lag_max_ms": lag * 1000,
        "cpu_seconds": cpu,
        "latency_ms": {
            "p50": percentile(run.latencies, 50) * 1000,
            "p90": percentile(run.latencies, 90) * 1000,
            "p99": percentile(run.latencies, 99) * 1000,
            "max": max(run.latencies, default=0.0) * 1000,
            "mean": sum(run.latencies) / len(run.latencies) * 1000 if run.latencies else 0.0,
        },
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="controller address host:port")
    p.add_argument("--requests", type=int, required=True, help="measured requests to send")
    p.add_argument("--rate", type=float, default=0.0, help="offered requests/s; 0 = as fast as acked")
    p.add_argument("--concurrency", type=int, default=256, help="requests in flight at --rate 0")
    p.add_argument("--devices", type=int, default=1000, help="devices to spread requests over")
    p.add_argument("--device-prefix", default="bench", help="device id prefix (see device_ids)")
    p.add_argument("--id-prefix", default="ld", help="request id prefix (unique per run)")
    p.add_argument("--warmup", type=int, default=100, help="unmeasured requests sent first")
    p.add_argument("--timeout", type=float, default=30.0, help="per-request RPC deadline, seconds")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = asyncio.run(generate(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0 if result["acked"] == result["sent"] else 1


if __name__ == "__main__":
    sys.exit(main())
