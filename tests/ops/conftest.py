"""The controller fixtures (real gRPC ports, a real topology sink) for the operations tests."""

from tests.controller.conftest import sink, start_controller

__all__ = ["sink", "start_controller"]
