"""Responses on their way out, and the transports that carry them: the outbox worker that posts each
response in per-device order until it is acknowledged in `outbox`, what it knows about the
receiver's status codes, back-off and the callback channel in `wire`, agent mode (dial out, requests
and responses on one stream) in `agent`, its server end in `agent_server`, and the topology sink
that receives for tests and demos in `sink`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.delivery.agent import Agent, AgentTransport
    from controller.delivery.agent_server import AgentHub
    from controller.delivery.outbox import Delivery
    from controller.delivery.sink import TopologySink
    from controller.delivery.wire import Transport

__all__ = ["Agent", "AgentHub", "AgentTransport", "Delivery", "TopologySink", "Transport"]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "Agent": "agent",
    "AgentHub": "agent_server",
    "AgentTransport": "agent",
    "Delivery": "outbox",
    "TopologySink": "sink",
    "Transport": "wire",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
