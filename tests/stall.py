"""A pytest plugin that stalls the test process, to reproduce the cause of a flaky test.

A loaded two-core CI host can stop a test worker's process for a second or more: a large object
collected, a big sort or parse in a C call that holds the GIL, the process not scheduled. A test
that runs a controller, a simulated BMC or a sink in its own process and allows less than that
fails now and then. This plugin makes such a stall happen on purpose: a thread holds the GIL in
one C call (a sort of random floats, sized to the seconds asked) at a fixed cadence, so every
coroutine and thread of the process stops for that long.

    DEVICECTL_TEST_STALL=HELD:EVERY:AFTER .venv/bin/python -m pytest -p tests.stall -s TEST

Seconds the GIL is held, between two stalls, and before the first (from the session's start).
Each stall prints `stall: held N s`. Off unless the variable is set; never in `make test`.
docs/testing.md ("A flaky test: reproduce its cause") has the fixes it proved.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

_VARIABLE = "DEVICECTL_TEST_STALL"
_CALIBRATION_ITEMS = 200_000


def _parse(text: str) -> tuple[float, float, float]:
    try:
        held, every, after = (float(part) for part in text.split(":"))
    except ValueError:
        raise pytest.UsageError(f"{_VARIABLE}={text!r}: give HELD:EVERY:AFTER in seconds") from None
    if held <= 0 or every < 0 or after < 0:
        raise pytest.UsageError(f"{_VARIABLE}={text!r}: HELD must be positive, EVERY and AFTER not negative")
    return held, every, after


def _say(line: str) -> None:
    """To the process's stderr, below Python: a test's `capsys` never reads it as its output."""
    os.write(2, f"{line}\n".encode())


def _sort_seconds(items: int) -> tuple[list[float], float]:
    data = [random.random() for _ in range(items)]
    started = time.perf_counter()
    sorted(data)
    return data, time.perf_counter() - started


def _calibrated(seconds: float) -> list[float]:
    """Floats that one `sorted` call takes about `seconds` to sort on this host: scaled from a small
    sort, then once more from a sort of the full size (a large one misses the caches more)."""
    items = _CALIBRATION_ITEMS
    data, took = _sort_seconds(items)
    for _ in range(2):
        items = max(_CALIBRATION_ITEMS, int(items * seconds / took))
        data, took = _sort_seconds(items)
    _say(f"stall: {items} floats sort in {took:.2f} s")
    return data


def _stall(data: list[float], every: float, after: float, stop: threading.Event) -> None:
    if stop.wait(after):
        return
    while True:
        started = time.monotonic()
        sorted(data)  # one C call: the GIL is not released until it returns
        _say(f"stall: held {time.monotonic() - started:.2f} s")
        if stop.wait(every):
            return


_stop = threading.Event()


def pytest_sessionstart(session: pytest.Session) -> None:
    text = os.environ.get(_VARIABLE)
    if text:
        held, every, after = _parse(text)
        data = _calibrated(held)  # before the first test, so AFTER counts from about its start
        threading.Thread(target=_stall, args=(data, every, after, _stop), name="stall", daemon=True).start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop.set()
