"""Process-wide tuning for a controller that holds thousands of BMC connections.

Measured with the fan-out benchmark (BENCHMARKS.md, "Profiling"): at 1,000 BMCs the defaults cost
more than the work itself.

- CPython's cyclic garbage collector: with the default thresholds (700, 10, 10) a full collection
  runs every ~70,000 net allocations and walks every live object; with thousands of open
  connections each walk took ~0.3 s, more than half of the controller's CPU. The hot path leaves no
  reference cycles behind, so collecting less often frees nothing later than it would have; the
  objects built at start-up are frozen out of every walk. A wave keeps a thousand activations
  alive, so the young collections promote most of what they walk, and each middle-generation
  collection then walked it all again: one of 0.29-0.34 CPU-s per 1,000-BMC steady wave (about
  6% of it) with the multiplier at 20, none with 100 (a collection every 5 million net
  allocations; the young ones, 0.9-1.1 CPU-s per run, are the same at any threshold, since what
  they walk is alive). Timed with `gc.callbacks`, as `devicectl_gc_cpu_seconds_total` exports it.
- asyncio gives every TLS connection a 256 KiB read buffer (`SSLProtocol.max_size`): 2,000
  connections pin 500 MB for Redfish replies of a few KiB. With 16 KiB (one full TLS record) an
  open connection cost ~53 KB in all (OpenSSL's state included) instead of ~290 KB; 8 KiB still
  takes a Redfish reply of a few KiB in one read (a larger one in two or more) and saves another
  8 KB per connection: ~8 MB at 500 BMCs (two connections each), with no CPU per call measurable.
- glibc gives each thread that contends for `malloc` an arena of its own (up to 8 per core), and
  the store's and gRPC's threads each fragment one. Two arenas (`MALLOC_ARENA_MAX=2`, a common
  setting for Python services) cost no measurable CPU; the peak RSS they save varied between runs
  (up to ~100 MB at 2,000 BMCs). An operator's own `MALLOC_ARENA_MAX` wins.
- The GIL's switch interval: the gRPC server runs on a thread of its own (controller/api/
  front_door.py), and each step of an ack waits until the busy execution thread hands it the GIL,
  after at most this interval. With the execution loop kept busy by pure-Python work, ping acks
  took p99 110-198 ms at CPython's 5 ms and 32-59 ms at 1 ms (2 ms: 41, 0.5 ms: 29): the interval
  only matters while another thread waits for the GIL, so the execution pays a switch per
  millisecond only while acks, the store's writer or gRPC's threads have work.
- The collector during a wave (`CollectionDeferral`): while at least `DEFER_COLLECTION_AT` jobs
  run, every activation's objects stay alive until the wave ends, so each young collection walks
  them and frees nothing; once the wave has passed, refcounting has freed them and a collection
  walks only what survives. Measured at 1,000 BMCs (BENCHMARKS.md, "The collector during a wave"):
  the collector off for the whole wave saved about 7% of a steady wave's CPU and 10% of a first
  contact's. It waits at most `LONGEST_DEFERRAL` seconds at a time: a load that never ends still
  has its cycles collected, one young collection per interval.
"""

from __future__ import annotations

import asyncio.sslproto
import ctypes
import gc
import logging
import os
import platform
import sys
import time
from collections.abc import Callable

from controller.observability import metrics

log = logging.getLogger(__name__)

#: young-generation size and the two older generations' multipliers (CPython's default: 700, 10, 10)
GC_THRESHOLDS = (50_000, 100, 10)
#: bytes asyncio reads from a TLS connection at a time (CPython's default: 256 KiB)
TLS_READ_BUFFER = 8 * 1024
#: seconds a thread holds the GIL while another waits for it (CPython's default: 0.005)
SWITCH_INTERVAL = 0.001
#: jobs running at once from which the cyclic collector waits for them to end
DEFER_COLLECTION_AT = 64
#: seconds the collector waits at most before one young collection runs (that one walks everything
#: the wave holds: at 4,000 BMCs a first contact's, forced after 30 s, took 1.5-1.8 CPU-s; so
#: longer than a wave lasts, only a load that never ends meets it)
LONGEST_DEFERRAL = 120.0
#: glibc malloc arenas (glibc's default: 8 per core)
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # from glibc's <malloc.h>


def tune_process() -> None:
    """Apply the thresholds, the TLS buffer size and the switch interval; call once, before the
    event loop starts."""
    gc.set_threshold(*GC_THRESHOLDS)
    metrics.time_garbage_collection()
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
    sys.setswitchinterval(SWITCH_INTERVAL)
    global _deferral
    if _deferral is None:
        _deferral = CollectionDeferral()
    arenas = limit_malloc_arenas(MALLOC_ARENAS)
    log.debug(
        "gc thresholds %s, TLS read buffer %d bytes, GIL switch interval %g s, malloc arenas %s",
        GC_THRESHOLDS,
        TLS_READ_BUFFER,
        SWITCH_INTERVAL,
        arenas or "unchanged",
    )


def limit_malloc_arenas(arenas: int) -> int | None:
    """Cap glibc's malloc arenas (before threads start); the cap applied, or None where not."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    return arenas if mallopt(_M_ARENA_MAX, arenas) == 1 else None


def freeze_startup_objects() -> None:
    """Exclude every object alive now (modules, settings, inventory) from future collections."""
    gc.collect()
    gc.freeze()
    log.debug("%d start-up objects frozen out of garbage collection", gc.get_freeze_count())


class CollectionDeferral:
    """Holds CPython's cyclic collector off while a wave runs (see the module docstring).

    `running(jobs)` is told the dispatcher's count of running jobs each time it changes. From
    `busy_at` jobs the collector is disabled; when fewer than a quarter of that run, it is enabled
    again, and the next allocation starts the collection it owes. A deferral longer than
    `longest` seconds runs one young collection and goes on. A collector disabled by someone else
    is left as it is."""

    def __init__(
        self,
        busy_at: int = DEFER_COLLECTION_AT,
        longest: float = LONGEST_DEFERRAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.busy_at = busy_at
        self.longest = longest
        self._clock = clock
        #: when this deferral began (None: the collector is not held off by us)
        self._since: float | None = None

    @property
    def deferred(self) -> bool:
        return self._since is not None

    def running(self, jobs: int) -> None:
        if self._since is None:
            if jobs >= self.busy_at and gc.isenabled():
                gc.disable()
                self._since = self._clock()
            return
        if jobs < max(1, self.busy_at // 4):
            gc.enable()
            held = self._clock() - self._since
            log.debug("cyclic garbage collection deferred for %.1f s while a wave ran", held)
            self._since = None
        elif self._clock() - self._since > self.longest:
            gc.collect(0)
            self._since = self._clock()


#: the process's deferral (`tune_process` makes it; None: collections run as CPython schedules them)
_deferral: CollectionDeferral | None = None


def jobs_running(jobs: int) -> None:
    """The dispatcher's count of running jobs changed (see `CollectionDeferral`)."""
    if _deferral is not None:
        _deferral.running(jobs)
