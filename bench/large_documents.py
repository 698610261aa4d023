"""`python -m bench.large_documents`: how long one multi-MiB Redfish document holds the event loop.

A coroutine ticks every millisecond while a document of `--mib` MiB (a log-entry collection) is
decoded as `BmcClient` decodes a reply: inline (`json.loads` on the loop, what a reply under
`off_loop.OFF_LOOP_BYTES` gets) and off the loop (`off_loop.run` with the yielding parse, what a
larger one gets). Printed: the decode's wall time and the longest gap between two ticks, the
time every other BMC's request waited. Timings belong here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from plugins.redfish._wire import off_loop
from plugins.redfish._wire.document import loads


def _document(mib: float) -> bytes:
    entry = {"@odata.id": "/redfish/v1/Systems/1/LogServices/SEL/Entries/0", "Message": "x" * 60}
    count = int(mib * (1 << 20) / (len(json.dumps(entry)) + 2))
    return json.dumps({"Members": [dict(entry, Id=str(i)) for i in range(count)]}).encode()


async def _longest_gap(decode: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    await decode()
    took = time.perf_counter() - started
    await asyncio.sleep(0.02)
    done.set()
    await ticker
    return took, max(gaps)


async def _main(mib: float) -> None:
    body = _document(mib)

    async def inline() -> Any:
        return loads(body.decode())

    async def worker() -> Any:
        return await off_loop.run(lambda: loads(body.decode(), yielding=True))

    print(f"document: {len(body) / (1 << 20):.1f} MiB")
    for name, decode in (("inline", inline), ("off the loop", worker)):
        took, gap = await _longest_gap(decode)
        print(f"{name:>13}: decode {took * 1000:6.0f} ms, longest event-loop gap {gap * 1000:6.0f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=float, default=8.0, help="document size in MiB (default 8)")
    asyncio.run(_main(parser.parse_args(argv).mib))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
