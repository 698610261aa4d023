"""Desired state: the limits a successful change leaves in force and how drift from them is judged in
`limits`, the periodic drift check and re-application in `drift`, dry runs that plan a request
without writing in `dryrun`, and the receipts of every device write in `receipts`
(docs/desired-state.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.desired.drift import DriftChecker
    from controller.desired.dryrun import Planner
    from controller.desired.limits import Finding, compare_paths, desired_from
    from controller.desired.receipts import desired_records, failed_writes_note, write_records

__all__ = [
    "DriftChecker",
    "Finding",
    "Planner",
    "compare_paths",
    "desired_from",
    "desired_records",
    "failed_writes_note",
    "write_records",
]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "DriftChecker": "drift",
    "Finding": "limits",
    "Planner": "dryrun",
    "compare_paths": "limits",
    "desired_from": "limits",
    "desired_records": "receipts",
    "failed_writes_note": "receipts",
    "write_records": "receipts",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
