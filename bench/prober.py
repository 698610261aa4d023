"""Ack probes from a process of their own: `python -m bench.prober ADDRESS REQUESTS_FILE`.

The fan-out benchmark's own process also serves the topology sink, which takes a wave's thousands
of responses while the wave runs; a probe timed on that process's event loop would count the
benchmark's own backlog as the controller's ack latency. This process does nothing else: every
`--interval` seconds it sends one of the requests again (one at a time, the next after the ack)
with a blocking stub, and prints each ack's wait in ms on a line of its own (`fail CODE` for a
refused or failed one) until SIGTERM or its stdin closes.

REQUESTS_FILE holds serialized `DeviceControllerRequest`s, each preceded by its length (4 bytes,
big-endian). Repeating a request_id takes the whole ack path (validation, the journal's insert,
found journaled, one journal read) and never runs the request twice.
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import grpc

from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc

#: seconds between one ack and the next probe
INTERVAL = 0.05


def write_requests(path: Path, requests: Iterable[pb.DeviceControllerRequest]) -> None:
    """The requests file the prober reads."""
    with path.open("wb") as out:
        for request in requests:
            data = request.SerializeToString()
            out.write(struct.pack(">I", len(data)))
            out.write(data)


def read_requests(path: Path) -> list[pb.DeviceControllerRequest]:
    data, requests, at = path.read_bytes(), [], 0
    while at < len(data):
        (size,) = struct.unpack_from(">I", data, at)
        at += 4
        requests.append(pb.DeviceControllerRequest.FromString(data[at : at + size]))
        at += size
    return requests


def parse_lines(lines: Iterable[str]) -> tuple[list[float], int]:
    """The prober's output: ack waits in ms, and how many probes failed."""
    waits: list[float] = []
    failures = 0
    for line in lines:
        line = line.strip()
        if line.startswith("fail"):
            failures += 1
        elif line:
            waits.append(float(line))
    return waits, failures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.prober", description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("requests", type=Path)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    args = parser.parse_args(argv)
    requests = read_requests(args.requests)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    with grpc.insecure_channel(args.address) as channel:
        stub = dgrpc.DeviceControllerStub(channel)
        index = 0
        while not stop.is_set():
            request = requests[(index * 7919) % len(requests)]  # spread over the devices
            index += 1
            sent = time.monotonic()
            try:
                stub.SendDeviceRequest(request, timeout=60)
                print(f"{(time.monotonic() - sent) * 1000:.3f}", flush=True)
            except grpc.RpcError as exc:
                print(f"fail {exc.code().name if hasattr(exc, 'code') else 'UNKNOWN'}", flush=True)
            stop.wait(args.interval)


if __name__ == "__main__":
    main()
