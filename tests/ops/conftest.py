"""The controller fixtures (real gRPC ports, a real topology sink) for the operations tests, and a
real Prometheus (tests/ops/test_prometheus.py)."""

from tests.controller.conftest import start_controller
from tests.ops.test_prometheus import prometheus

__all__ = ["prometheus", "start_controller"]
