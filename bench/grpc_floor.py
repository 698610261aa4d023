"""The gRPC floor of one request: CPU per unary call, both ends in one process, nothing else.

Every request the controller answers is one inbound unary call (`SendDeviceRequest`) and one
outbound (`DeviceResponse` to the topology callback): together, the two ends of one call.
`python -m bench.grpc_floor` serves `TopologyCallback` with an empty handler and calls it with a
no-op response over loopback, `--in-flight` at a time, and prints this process's CPU per call:
the part of the controller's CPU per request that no change to its own path can remove.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

import grpc
from google.protobuf import empty_pb2

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import topology_callback_pb2_grpc as cb


class _EmptySink(cb.TopologyCallbackServicer):
    async def DeviceResponse(
        self, request: pb.DeviceControllerResponse, context: grpc.aio.ServicerContext
    ) -> empty_pb2.Empty:
        return empty_pb2.Empty()


async def cpu_per_call(calls: int, in_flight: int = 64, warmup: int = 500) -> float:
    """Seconds of this process's CPU per unary call (client and server side together)."""
    server = grpc.aio.server()
    cb.add_TopologyCallbackServicer_to_server(_EmptySink(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        stub = cb.TopologyCallbackStub(channel)
        response = pb.DeviceControllerResponse(device="bench0001", request_id="bench-000001", trace_id="t")
        slots = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with slots:
                await stub.DeviceResponse(response, timeout=30)

        await asyncio.gather(*(one() for _ in range(warmup)))
        began = time.process_time()
        await asyncio.gather(*(one() for _ in range(calls)))
        return (time.process_time() - began) / calls
    finally:
        await channel.close()
        await server.stop(None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000, help="measured calls (default 5000)")
    parser.add_argument("--in-flight", type=int, default=64, help="calls in flight (default 64)")
    args = parser.parse_args(argv)
    seconds = asyncio.run(cpu_per_call(args.calls, args.in_flight))
    print(f"{seconds * 1000:.3f} ms CPU per unary call, client and server side together ({args.calls} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
