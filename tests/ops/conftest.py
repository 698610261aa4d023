"""The controller fixtures (real gRPC ports, a real topology sink) for the operations tests."""

from tests.controller.conftest import start_controller

__all__ = ["start_controller"]
