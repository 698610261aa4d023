"""Running what was acknowledged: per-device lanes in journal order under a global limit in `dispatch`,
one job to exactly one completion in `runner`, the device's entry, plugin, model, state and
credentials in `resolve`, completion writes retried in place in the device's lane in `completions`,
and the follow-up checks plugins ask for in `verifier`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.execution.completions import CompletionWriter
    from controller.execution.dispatch import Dispatcher, Job
    from controller.execution.resolve import DeviceResolver, Resolved
    from controller.execution.runner import RequestRunner
    from controller.execution.verifier import Verifier

__all__ = ["CompletionWriter", "DeviceResolver", "Dispatcher", "Job", "RequestRunner", "Resolved", "Verifier"]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "CompletionWriter": "completions",
    "DeviceResolver": "resolve",
    "Dispatcher": "dispatch",
    "Job": "dispatch",
    "RequestRunner": "runner",
    "Resolved": "resolve",
    "Verifier": "verifier",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
