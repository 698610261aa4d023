"""`devicectl serve` started as its own process (so a test can SIGKILL it): a free port, and the
start that waits for gRPC health to say SERVING."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_port

__all__ = ["ROOT", "free_port", "start_serving"]

ROOT = Path(__file__).resolve().parents[1]


async def start_serving(
    args: Sequence[str], env: Mapping[str, str], log: Path, port: int, tries: int
) -> subprocess.Popen[bytes]:
    """Start `args` (output appended to `log`) and poll its health every 0.1 s, `tries` times at most."""
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(tries):
            if proc.poll() is not None:
                raise AssertionError(f"serve exited: {_tail(log)}")
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return proc
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"serve did not come up: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text()[-2000:]
