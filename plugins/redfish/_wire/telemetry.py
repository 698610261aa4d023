"""Prometheus metrics of the Redfish plugin, on prometheus_client's default registry.

The plugin never imports the controller: it registers its own `devicectl_bmc_*` metrics and the
controller's `/metrics` endpoint (which serves the default registry) exports them when the plugin
runs in-process. Labels are bounded: HTTP method, status code (or `error` when no reply came),
outcome (a status class) and platform (the four known ones, or `undiscovered` before discovery),
never a BMC address: a per-BMC series at fleet scale would be tens of thousands of histograms. A
slow BMC is found from the request's trace id in the logs, or with `devicectl bmc` against it.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

BMC_REQUESTS = Counter(
    "devicectl_bmc_requests",
    "HTTP requests sent to BMCs, by method, status code (error: no reply) and platform",
    ["method", "status", "platform"],
)
SESSIONS_OPEN = Gauge("devicectl_bmc_sessions_open", "Redfish sessions this process holds open on BMCs")
# a BMC's session table is small (GB200: 4) and only reports its size by refusing one more: the
# refusals are what an alert can see (deploy/helm/devicectl/files/alerts.yaml)
SESSION_LIMIT = Counter(
    "devicectl_bmc_session_limit_reached",
    "Logins a BMC refused with SessionLimitExceeded, by result (freed: devicectl's own leaked "
    "sessions deleted and the login retried; basic: Basic auth instead; refused: the request failed)",
    ["result"],
)

# a resumed handshake skips the certificate exchange and its verification (TLS 1.2: the key
# exchange too); a low resumed share among reconnects means BMCs (or a proxy) issue no tickets
TLS_HANDSHAKES = Counter(
    "devicectl_bmc_tls_handshakes",
    "TLS handshakes completed with BMCs, by whether the origin's kept session was resumed "
    "(true) or the handshake was a full one (false)",
    ["resumed"],
)

# HTTPS calls to a BMC take from a few milliseconds (a cached GET) to tens of seconds (a slow PATCH
# on a busy BMC, a task poll); the buckets span both
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BMC_CALL_SECONDS = Histogram(
    "devicectl_bmc_request_duration_seconds",
    "One HTTP request to a BMC, from send to reply, by method and outcome "
    "(ok: 1xx-3xx, client_error: 4xx, server_error: 5xx, error: no reply)",
    ["method", "outcome"],
    buckets=_CALL_BUCKETS,
)


def outcome_of(status: str) -> str:
    """The latency histogram's outcome for a `devicectl_bmc_requests` status label."""
    if not status.isdigit():
        return "error"
    code = int(status)
    return "ok" if code < 400 else "client_error" if code < 500 else "server_error"
