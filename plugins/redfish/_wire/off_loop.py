"""Large replies are decoded off the event loop: a body over `OFF_LOOP_BYTES` is inflated, scanned
for its bounds and parsed as JSON in a small pool of worker threads, so one BMC's multi-MiB
document never stalls the requests of every other BMC (docs/redfish.md, "Framing"). Small bodies,
nearly every reply, are decoded inline: a thread hop costs more than they do.

Why this frees the loop: `zlib` releases the GIL while it inflates, and the bound scans are many
short C calls; `json.loads` holds the GIL for a whole call, so the JSON of a large body is parsed
with a Python hook per object (`document.loads(..., yielding=True)`), which lets the loop thread
take the GIL back every switch interval while the worker parses.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

#: a body this large (bytes, decoded) is decoded in a worker thread; smaller ones inline
OFF_LOOP_BYTES = 256 * 1024
#: worker threads (decoding is CPU work: more would only contend for the same cores)
WORKERS = 2

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


class OffLoopStats:
    """How many decodes ran in a worker thread, and the last one's thread (for tests and the
    metrics endpoint's curious readers)."""

    def __init__(self) -> None:
        self.decodes = 0
        self.last_thread: int | None = None

    def note(self) -> None:
        self.decodes += 1
        self.last_thread = threading.get_ident()


STATS = OffLoopStats()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="redfish-decode")
        return _pool


async def run(work: Callable[[], T]) -> T:
    """Run `work` (a decode) in a worker thread. A cancel leaves it to finish there (its result is
    dropped): decoding has no effect beyond its result."""

    def counted() -> T:
        STATS.note()
        return work()

    return await asyncio.get_running_loop().run_in_executor(_executor(), counted)
