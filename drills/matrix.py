"""BMC fault matrix: one simulated BMC misbehaves in one way at a time; the others must not notice.

Each row injects a fault on BMC 0 (through the simulator's control endpoint), sends one GPU-cap
request to every device, and records the faulty device's response, whether every other device got a
successful response with its caps applied, and whether the faulty device works again once the
fault is cleared. Over the whole matrix: nothing lost or stuck, order kept, no tracebacks.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2_grpc as dgrpc
from drills.common import backend_database, session_figures
from drills.load import CHANNEL_OPTIONS, Sent
from drills.stack import Stack
from drills.verdict import verdict
from plugins.base import GpuPoliciesChange, GpuPolicy, PolicyAction, PowerLimit, RequestKind


@dataclass(frozen=True)
class Row:
    name: str
    #: PUT /bmcs/0/faults body (None: no request fault)
    faults: dict[str, Any] | None = None
    #: PATCH /bmcs/0/config body, before the faults
    config: dict[str, Any] | None = None
    expire_sessions: bool = False
    #: "ok" or "error" for the faulty device; None when either is acceptable (recorded only)
    expect: str | None = "error"


ROWS = (
    Row("hang on writes (30 s, read timeout 2 s)", {"mode": "hang", "writes_only": True, "hang_seconds": 30}),
    Row("connection reset on every write", {"mode": "reset", "writes_only": True}),
    Row("connection reset twice, then fine", {"mode": "reset", "count": 2}, expect="ok"),
    Row("HTTP 500 on every write", {"mode": "http500", "writes_only": True}),
    Row("HTTP 500 on every call", {"mode": "http500"}),
    Row("HTTP 503 + Retry-After 1 s, twice", {"mode": "http503", "retry_after": 1, "count": 2}, expect="ok"),
    Row("HTTP 503 + Retry-After 30 s on writes", {"mode": "http503", "writes_only": True, "retry_after": 30}),
    Row("NVIDIA 0x50A busy once", {"mode": "nvidia-busy", "writes_only": True, "count": 1}, expect="ok"),
    Row("NVIDIA 0x50A busy on every write", {"mode": "nvidia-busy", "writes_only": True}),
    Row(
        "NVIDIA 0x600 timeout (write landed)",
        {"mode": "nvidia-timeout", "writes_only": True, "count": 1},
        expect="ok",
    ),
    Row("invalid JSON in every reply", {"mode": "invalid-json"}),
    Row("silent revert of caps", {"revert_after": 0.0}, config={"latency": 0.02}),
    Row("Redfish sessions expired", expire_sessions=True, expect="ok"),
    Row("slow BMC (0.4 s per call)", config={"latency": 0.4}, expect="ok"),
    Row("asynchronous writes (202 + task)", config={"async_writes": True, "task_delay": 0.3}, expect="ok"),
    # last: a plugin that cannot log in must recover once the BMC accepts sessions again
    Row("session limit 0 (sessions expired)", config={"session_limit": 0}, expire_sessions=True, expect=None),
)
HEALTHY = {"latency": 0.0, "session_limit": 4, "async_writes": False}


@dataclass(frozen=True)
class MatrixConfig:
    bmcs: int = 4
    timeout_seconds: int = 10
    answer_limit: float = 60.0


REDUCED = MatrixConfig()
FULL = MatrixConfig(bmcs=16)


async def run(config: MatrixConfig, workdir: Path) -> dict[str, Any]:
    with backend_database("sqlite", workdir) as url:
        assert url is not None
        stack = Stack(workdir / "matrix", bmcs=config.bmcs, database_url=url, name="matrix")
        sent: list[Sent] = []
        rows = []
        try:
            await stack.start()
            async with grpc.aio.insecure_channel(stack.ctl.address, options=CHANNEL_OPTIONS) as channel:
                rounds = _Rounds(stack, dgrpc.DeviceControllerStub(channel), config, sent)
                for index, row in enumerate(ROWS):
                    rows.append(await _row(stack, rounds, row, index))
            overall = await verdict(stack, sent, database_url=url, drain_limit=config.answer_limit)
            overall.update(await session_figures(stack))
        finally:
            await stack.close()
    if overall["tracebacks"]:
        overall["problems"].append(f"{overall['tracebacks']} tracebacks in the controller log")
    return {"drill": "matrix", "config": asdict(config), "rows": rows, "overall": overall}


class _Rounds:
    """One request per device (or to some devices), acknowledged, then all answers awaited."""

    def __init__(
        self, stack: Stack, stub: dgrpc.DeviceControllerStub, config: MatrixConfig, sent: list[Sent]
    ) -> None:
        self.stack, self.stub, self.config, self.sent = stack, stub, config, sent
        self.n = 0

    async def send(self, devices: list[int], watts: float) -> tuple[dict[int, Any], float]:
        """Returns device index -> first response (Arrival) and the seconds the slowest took."""
        self.n += 1
        ids = {}
        began = time.monotonic()
        for i in devices:
            device = self.stack.devices[i]
            rid = f"matrix-{self.n:03d}-{device}"
            change = GpuPoliciesChange(
                "drill",
                PolicyAction.SET,
                policies=tuple(GpuPolicy(g, PowerLimit(watts=watts)) for g in range(4)),
            )
            request = translate.request_to_proto(
                RequestKind.GPU_POLICIES_UPDATE,
                change,
                device=device,
                request_id=rid,
                timeout_seconds=self.config.timeout_seconds,
            )
            await self.stub.SendDeviceRequest(request, timeout=10.0)
            self.sent.append(Sent(rid, device, watts, time.monotonic()))
            ids[i] = rid
        deadline = time.monotonic() + self.config.answer_limit
        while time.monotonic() < deadline:
            self.stack.sink.poll()
            first = self.stack.sink.first()
            if all(r in first for r in ids.values()):
                break
            await asyncio.sleep(0.05)
        first = self.stack.sink.first()
        got = {i: first[r] for i, r in ids.items() if r in first}
        return got, max((a.seen_at for a in got.values()), default=time.monotonic()) - began


def _text(arrival: Any) -> str:
    """The response in one line: "ok", or the first GPU's error without the BMC's URL (a port)."""
    if arrival is None:
        return "NO RESPONSE"
    if arrival.ok:
        return "ok"
    first = re.split(r"; gpu \d+: ", arrival.error)[0]
    first = re.sub(r"^gpu \d+: (GPU \d+: )?", "", first)
    first = re.sub(r"https://127\.0\.0\.1:\d+: ", "", first)
    first = re.sub(r"/redfish/v1/\S*/Processors/", ".../", first)  # the resource's tail says enough
    return "error: " + " ".join(first.split())[:200]


async def _row(stack: Stack, rounds: _Rounds, row: Row, index: int) -> dict[str, Any]:
    watts = float(300 + 20 * index)
    everyone = list(range(len(stack.devices)))
    if row.config:
        await stack.control("PATCH", "/bmcs/0/config", row.config)
    if row.faults:
        await stack.control("PUT", "/bmcs/0/faults", row.faults)
    if row.expire_sessions:
        await stack.control("POST", "/bmcs/0/sessions/expire")
    try:
        got, took = await rounds.send(everyone, watts)
    finally:
        await stack.control("DELETE", "/bmcs/0/faults")
        await stack.control("PATCH", "/bmcs/0/config", HEALTHY)
    victim = got.get(0)
    neighbours_ok = all(i in got and got[i].ok for i in everyone[1:])
    for i in everyone[1:]:
        neighbours_ok = neighbours_ok and await stack.gpu_caps(i) == [watts] * 4
    # the faulty BMC, healthy again, must work (a broken session or pool must not linger)
    again, _ = await rounds.send([0], watts + 5)
    recovered = 0 in again and again[0].ok and await stack.gpu_caps(0) == [watts + 5] * 4
    outcome = None if victim is None else ("ok" if victim.ok else "error")
    problems = []
    if len(got) != len(everyone):
        problems.append(f"{len(everyone) - len(got)} devices unanswered")
    if not neighbours_ok:
        problems.append("a healthy device was harmed")
    if row.expect is not None and outcome != row.expect:
        problems.append(f"expected {row.expect}, got {_text(victim)}")
    if not recovered:
        problems.append(f"did not recover after the fault was cleared: {_text(again.get(0))}")
    return {
        "fault": row.name,
        "expected": row.expect or "either",
        "response": _text(victim),
        "answered_s": round(took, 2),
        "neighbours_unharmed": neighbours_ok,
        "recovered": recovered,
        "problems": problems,
    }
