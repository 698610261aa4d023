"""Prometheus metrics of the Redfish plugin, on prometheus_client's default registry.

The plugin never imports the controller: it registers its own `devicectl_bmc_*` metrics and the
controller's `/metrics` endpoint (which serves the default registry) exports them when the plugin
runs in-process. Labels are bounded: HTTP method, status code (or `error` when no reply came) and
platform (the four known ones, or `undiscovered` before discovery), never a BMC address.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

BMC_REQUESTS = Counter(
    "devicectl_bmc_requests",
    "HTTP requests sent to BMCs, by method, status code (error: no reply) and platform",
    ["method", "status", "platform"],
)
SESSIONS_OPEN = Gauge("devicectl_bmc_sessions_open", "Redfish sessions this process holds open on BMCs")
