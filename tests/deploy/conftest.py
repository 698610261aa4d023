"""The controller fixtures (real gRPC ports, a real topology sink) for the deployment tests, and a
real Prometheus (tests/deploy/test_prometheus.py)."""

from tests.controller.conftest import start_controller
from tests.deploy.test_prometheus import prometheus

__all__ = ["prometheus", "start_controller"]
