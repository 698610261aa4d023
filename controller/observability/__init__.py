"""What the controller tells operators about itself: Prometheus metrics in `metrics`, the HTTP endpoint
that serves them with `/healthz` and `/readyz` in `endpoint`, log lines that carry the request's
context in `logs`, gRPC health (readiness follows the journal, liveness the process) in `health`,
and the installed version in `version`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.observability.endpoint import MetricsServer, StateCollector
    from controller.observability.health import LIVENESS, JournalHealth
    from controller.observability.logs import JsonFormatter, clip, request_context
    from controller.observability.metrics import PowerGauges
    from controller.observability.version import installed_version

__all__ = [
    "LIVENESS",
    "JournalHealth",
    "JsonFormatter",
    "MetricsServer",
    "PowerGauges",
    "StateCollector",
    "clip",
    "installed_version",
    "request_context",
]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "JournalHealth": "health",
    "JsonFormatter": "logs",
    "LIVENESS": "health",
    "MetricsServer": "endpoint",
    "PowerGauges": "metrics",
    "StateCollector": "endpoint",
    "clip": "logs",
    "installed_version": "version",
    "request_context": "logs",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
