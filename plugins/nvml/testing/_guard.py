"""`forbid_writes()`: make every NVML function that changes something raise, for read-only checks.

The real-GPU tests run against a production driver: they must never write a limit, profile, clock
or any other setting. While this guard is active, every `pynvml` function whose name contains a
mutating verb raises `AssertionError`, and so does resolving such a C symbol directly (the way the
checked `_v2` limit setter does).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

#: verbs of NVML functions that change device or driver state
MUTATING = re.compile(
    r"Set|Clear|Reset|Update|Enable|Disable|Create|Destroy|Remove|Register|Discover|Modify|Freeze|Inject"
)


def is_mutating(name: str) -> bool:
    """Whether an NVML function (by its binding or C name) changes something.

    A verb after "Get" is part of what is read (`nvmlDeviceGetAutoBoostedClocksEnabled`).
    """
    match = MUTATING.search(name)
    getter = name.find("Get")
    return match is not None and not (0 <= getter < match.start())


@contextmanager
def forbid_writes() -> Iterator[list[str]]:
    """Patch the mutating `pynvml` functions to raise; yields the list of refused calls."""
    refused: list[str] = []
    saved: dict[str, Any] = {}

    def refuse(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            refused.append(name)
            raise AssertionError(f"{name} changes device state: refused in a read-only check")

        return call

    for name in dir(pynvml):
        obj = getattr(pynvml, name)
        if name.startswith("nvml") and inspect.isfunction(obj) and is_mutating(name):
            saved[name] = obj
            setattr(pynvml, name, refuse(name))
    resolve = pynvml._nvmlGetFunctionPointer

    def guarded_resolve(name: str) -> Any:
        if is_mutating(name):
            refused.append(name)
            raise AssertionError(f"C symbol {name} changes device state: refused in a read-only check")
        return resolve(name)

    saved["_nvmlGetFunctionPointer"] = resolve
    pynvml._nvmlGetFunctionPointer = guarded_resolve
    try:
        yield refused
    finally:
        for name, obj in saved.items():
            setattr(pynvml, name, obj)
