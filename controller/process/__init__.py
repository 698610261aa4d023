"""This process's life: its role and the executor processes `serve --workers N` starts and supervises
in `workers`, background loops kept alive through outages (a failing pass logged once, backed off
and retried) in `supervise`, and the process-wide tuning for thousands of connections (garbage
collector, TLS buffers, malloc arenas) in `runtime`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.process.runtime import tune_process
    from controller.process.supervise import Outage, describe
    from controller.process.workers import ExecutorPool, ProcessModelError, check_process_model, process_role

__all__ = [
    "ExecutorPool",
    "Outage",
    "ProcessModelError",
    "check_process_model",
    "describe",
    "process_role",
    "tune_process",
]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "ExecutorPool": "workers",
    "Outage": "supervise",
    "ProcessModelError": "workers",
    "check_process_model": "workers",
    "describe": "supervise",
    "process_role": "workers",
    "tune_process": "runtime",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
