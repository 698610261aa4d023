"""Ports for the servers the benchmarks and the tests start (the controller, simulators, proxies).

A port taken from the kernel with `bind(0)` comes from the ephemeral range, the same range every
outgoing connection's source port is drawn from: between the probe's close and the server's bind,
any client on the host (a test's own gRPC channel, a BMC call) may take it, and the server fails
with "Address already in use". Reproduced in a loaded suite run: a `serve` restarted on its port
after SIGTERM found it taken by another test's connection.

So ports are handed out from below the ephemeral range (read from the kernel; Linux's default is
32768-60999; above it on a host whose range starts near 1024), where no outgoing connection is
given a port, and each pytest-xdist worker gets its
own slice of that range, so two workers of one run never pick the same port. Within a process the
ports are handed out in turn and each one is checked to be free.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import Iterator

_SPAN = 12000  # ports below the ephemeral range this allocator uses
_FLOOR = 1024


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(part) for part in f.read().split()[:2])
            return first, last
    except (OSError, ValueError):
        return 32768, 60999


def _ephemeral_low() -> int:
    return _ephemeral_range()[0]


def _outside_ephemeral(first: int, last: int) -> tuple[int, int]:
    """The larger span of ports outside the ephemeral range `first`..`last`: below it (up to
    `_SPAN` ports above 1024) or, where the kernel hands out nearly every port, above it."""
    below = (max(_FLOOR, first - _SPAN), first)
    above = (last + 1, min(65536, last + 1 + _SPAN))
    return below if below[1] - below[0] >= above[1] - above[0] else above


def _slice() -> range:
    """This process's ports: a slice of the range outside the ephemeral ports, one per xdist worker."""
    low, high = _outside_ephemeral(*_ephemeral_range())
    if high - low < 64:
        raise RuntimeError(f"too few ports outside the ephemeral range ({low}-{high - 1}) to hand out")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if worker.startswith("gw") and worker[2:].isdigit() and count > 1:
        size = (high - low) // count
        start = low + int(worker[2:]) % count * size
        return range(start, start + size)
    return range(low, high)


_lock = threading.Lock()
_ports = _slice()
_next: Iterator[int] = itertools.cycle(
    itertools.chain(
        range(start := random.randrange(_ports.start, _ports.stop), _ports.stop), range(_ports.start, start)
    )
)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and that no outgoing connection will be given."""
    return free_port_run(1)


def free_port_run(count: int) -> int:
    """The first of `count` consecutive free ports (a front end's port and its executors' above it)."""
    with _lock:
        for _ in range(len(_ports)):
            base = next(_next)
            if base + count <= _ports.stop and all(_bindable(base + i) for i in range(count)):
                for _ in range(count - 1):
                    next(_next)  # the run is handed out whole
                return base
    raise RuntimeError(f"no run of {count} free ports in {_ports.start}-{_ports.stop - 1}")
