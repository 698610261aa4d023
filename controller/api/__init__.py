"""The controller's gRPC front door: the `DeviceController` servicer (validate, journal, acknowledge)
in `service`, the operator-facing `DeviceControllerAdmin` servicer in `admin`, the interceptor that
answers undecodable request bytes `INVALID_ARGUMENT` in `decode`, every validation rule, each error
naming its field, in `validate`, and the strict parsing of JSON request fields with size and depth
limits in `json_fields`. What happens to a request once acknowledged is `controller.execution`'s.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.api.admin import AdminService, Watchers
    from controller.api.decode import DecodeGuard
    from controller.api.json_fields import parse_json_object
    from controller.api.service import DeviceControllerService, JournalUnavailableError
    from controller.api.validate import request_problems, validate_request

__all__ = [
    "AdminService",
    "DecodeGuard",
    "DeviceControllerService",
    "JournalUnavailableError",
    "Watchers",
    "parse_json_object",
    "request_problems",
    "validate_request",
]

#: the module of each public name, imported on first use: importing one module of this room
#: (as the controller's own code always does) imports none of the others
_HOME = {
    "AdminService": "admin",
    "DecodeGuard": "decode",
    "DeviceControllerService": "service",
    "JournalUnavailableError": "service",
    "Watchers": "admin",
    "parse_json_object": "json_fields",
    "request_problems": "validate",
    "validate_request": "validate",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
