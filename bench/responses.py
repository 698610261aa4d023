"""The topology sink as the benchmarks use it: which responses arrived, when, and how many times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from bench.util import say
from controller import translate
from controller._proto.devicecontroller.v1 import devicecontroller_pb2 as pb
from controller.delivery.sink import TopologySink


class ResponseTracker:
    """A `TopologySink` plus bookkeeping for one expected set of request ids at a time.

    `TopologySink.wait_for` re-checks every id on every arrival (quadratic); this keeps O(1) work per
    response, so the sink costs the benchmark process little while thousands arrive.
    """

    def __init__(self) -> None:
        self.sink = TopologySink("127.0.0.1:0", on_response=self._arrived)
        self._expected: set[str] = set()
        self._waiting: set[str] = set()
        self._done = asyncio.Event()
        #: arrival time (time.monotonic()) of each expected response, first copy only
        self.arrivals: dict[str, float] = {}
        #: request id -> error text, for expected responses that report a failure
        self.failures: dict[str, str] = {}
        #: responses whose request id was not expected
        self.unexpected = 0

    async def start(self) -> str:
        """Start the sink; returns its address for the controller's `--callback`."""
        await self.sink.start()
        return self.sink.address

    async def stop(self) -> None:
        await self.sink.stop()

    async def agent_connected(self, agent_id: str, timeout: float) -> None:
        """Wait until an agent dialed in (agent-mode ingest)."""
        agents = self.sink.agents.agents
        async with asyncio.timeout(timeout):
            while not (agent_id in agents and agents[agent_id].connected):  # noqa: ASYNC110 (no event to wait on)
                await asyncio.sleep(0.05)

    def expect(self, request_ids: Iterable[str]) -> None:
        """Begin a new phase: these ids (and only these) are expected from now on."""
        self._expected = set(request_ids)
        self._waiting = set(self._expected)
        self.arrivals = {}
        self.failures = {}
        self.unexpected = 0
        self._done = asyncio.Event()
        if not self._waiting:
            self._done.set()

    def drop(self, request_ids: Iterable[str]) -> None:
        """No longer expect these (e.g. requests the controller refused, so never journaled)."""
        gone = set(request_ids)
        self._expected -= gone
        self._waiting -= gone
        if not self._waiting:
            self._done.set()

    def _arrived(self, response: pb.DeviceControllerResponse) -> None:
        rid = response.request_id
        if rid not in self._expected:
            self.unexpected += 1
            return
        if rid not in self._waiting:
            return  # a duplicate: visible in `duplicates`
        self._waiting.discard(rid)
        self.arrivals[rid] = time.monotonic()
        ok, error = translate.success_of(response)
        if not ok:
            self.failures[rid] = error
        if not self._waiting:
            self._done.set()

    @property
    def received(self) -> int:
        """Distinct expected responses received so far."""
        return len(self._expected) - len(self._waiting)

    @property
    def duplicates(self) -> int:
        """Extra copies of expected responses (delivery is at-least-once; there should be none)."""
        return sum(self.sink.counts[r] - 1 for r in self._expected if self.sink.counts[r] > 1)

    async def wait(self, timeout: float, label: str, every: float = 2.0) -> float:
        """Wait for every expected response, printing progress; returns when the last one arrived.

        Raises:
            TimeoutError: not all arrived within `timeout` seconds (the message says how many did).
        """
        deadline = time.monotonic() + timeout
        last = -1
        while not self._done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"{label}: only {self.received} of {len(self._expected)} responses after {timeout:.0f} s"
                )
            try:
                await asyncio.wait_for(self._done.wait(), min(every, left))
            except TimeoutError:
                if self.received != last:
                    last = self.received
                    say(f"{label}: {self.received}/{len(self._expected)} responses")
        return max(self.arrivals.values(), default=time.monotonic())
