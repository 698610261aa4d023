"""Load as a topology service sends it: one sender per device, each request retried until acknowledged.

Every request sets the four GPU caps of its device to one value (different from the previous one),
so the caps on the BMC at the end say which request ran last. A device's next request is sent only
after the previous one was acknowledged: the acknowledgement order is the order the controller
must keep for that device. An unacknowledged request is retried with the same request id (the
controller de-duplicates), within a bounded number of attempts and time.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from plugins.base import GpuPoliciesChange, GpuPolicy, PolicyAction, PowerLimit, RequestKind

#: gRPC reconnects within a second after a controller restart (its default back-off grows to 2 min)
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclass(frozen=True)
class Sent:
    """A request sent: acknowledged, or given up unacknowledged (`Load.unsettled`)."""

    request_id: str
    device: str
    watts: float
    acked_at: float


def watts_for(device_index: int, k: int) -> float:
    """The cap of request `k` to device `device_index`: within 200..1199 W, never the previous one."""
    return float(200 + (k * 37 + device_index * 11) % 1000)


def cap_request(
    device: str, request_id: str, watts: float, timeout_seconds: int
) -> pb.DeviceControllerRequest:
    """The request setting all four GPU caps of `device` to `watts`."""
    change = GpuPoliciesChange(
        "drill",
        PolicyAction.SET,
        policies=tuple(GpuPolicy(g, PowerLimit(watts=watts)) for g in range(4)),
    )
    return translate.request_to_proto(
        RequestKind.GPU_POLICIES_UPDATE,
        change,
        device=device,
        request_id=request_id,
        timeout_seconds=timeout_seconds,
    )


class Tally(Protocol):
    """A sender's limit on one request's acknowledgement (retries included) and what became of them."""

    ack_limit: float
    unacked: list[str]
    #: request ids refused with a status other than "try again" (bad input: must be none here)
    refused: dict[str, str]
    retries: Counter[str]


async def send_until_acked(
    tally: Tally, stubs: Sequence[dgrpc.DeviceControllerStub], door: int, request: object, rid: str
) -> int | None:
    """Send `request` from door `door` on, the next door after each failure (at once while the round
    of doors lasts, 0.2 s between rounds): the door that acknowledged it, or None when it was refused
    or not acknowledged within `tally.ack_limit` (recorded in `tally`)."""
    deadline = time.monotonic() + tally.ack_limit
    attempt = 0
    while True:
        which = (door + attempt) % len(stubs)
        try:
            await stubs[which].SendDeviceRequest(request, timeout=5.0)
            return which
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED):
                tally.refused[rid] = f"{code.name}: {exc.details()}"
                return None
            tally.retries[code.name] += 1
        attempt += 1
        if time.monotonic() >= deadline:
            tally.unacked.append(rid)
            return None
        await asyncio.sleep(0.02 if attempt % len(stubs) else 0.2)


@dataclass
class Load:
    """Senders for `devices` against the controller at `target`."""

    target: str
    devices: list[str]
    prefix: str
    #: seconds a sender waits between two of its requests (0: as soon as the last was acked)
    interval: float = 0.0
    #: requests per device at most (the load also stops on `stop()`)
    per_device: int = 1_000_000
    timeout_seconds: int = 60
    #: time one request may take to be acknowledged, retries included
    ack_limit: float = 90.0
    acked: list[Sent] = field(default_factory=list)
    unacked: list[str] = field(default_factory=list)
    #: the requests given up unacknowledged (each sender's last): one may have been journaled
    #: before its ack was lost, and then it runs and is answered like any other
    unsettled: list[Sent] = field(default_factory=list)
    #: request ids refused with a status other than "try again" (bad input: must be none here)
    refused: dict[str, str] = field(default_factory=dict)
    retries: Counter[str] = field(default_factory=Counter)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _channel: grpc.aio.Channel | None = None

    def start(self) -> None:
        self._channel = grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)
        stub = dgrpc.DeviceControllerStub(self._channel)
        self._tasks = [asyncio.create_task(self._sender(stub, i, d)) for i, d in enumerate(self.devices)]

    async def stop(self) -> None:
        """Let each sender finish its request in flight (bounded by `ack_limit`), then stop."""
        self._stop.set()
        await self.wait()

    async def wait(self) -> None:
        """Wait until every sender is done (`per_device` reached or stopped)."""
        await asyncio.gather(*self._tasks)
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _sender(self, stub: dgrpc.DeviceControllerStub, index: int, device: str) -> None:
        for k in range(self.per_device):
            if self._stop.is_set():
                return
            rid = f"{self.prefix}-{device}-{k:06d}"
            watts = watts_for(index, k)
            request = cap_request(device, rid, watts, self.timeout_seconds)
            if await send_until_acked(self, [stub], 0, request, rid) is None:
                if rid not in self.refused:
                    self.unsettled.append(Sent(rid, device, watts, time.monotonic()))
                return  # not acknowledged: the next request would overtake it
            self.acked.append(Sent(rid, device, watts, time.monotonic()))
            if self.interval > 0:
                try:
                    await asyncio.wait_for(self._stop.wait(), self.interval)
                except TimeoutError:
                    pass
