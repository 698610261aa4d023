"""Per-BMC counters that tests read in-process and benchmarks read over the control endpoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

#: stats key for requests whose path matches no resource template (raw paths would grow without bound)
UNMATCHED = "(unmatched)"


class BmcStats:
    """Request, session and connection counters of one simulated BMC.

    `calls` is keyed by `(method, path_template)`, e.g.
    `("PATCH", "/redfish/v1/Systems/HGX_Baseboard_0/Processors/{id}/EnvironmentMetrics")`.
    `max_in_flight` is the highest number of requests in progress at once (what a client's per-BMC
    concurrency limit should bound); `max_open_connections` is the same for TCP connections.

    Each client (a controller process) logs in on its own, so the Redfish session a request's
    `X-Auth-Token` names tells clients apart: `max_sessions_in_flight` is the most sessions with
    requests in progress at once, and `session_overlaps` counts requests that started while another
    session had one in progress (0: no two clients ever worked this BMC at the same time). Requests
    without a known session (logins, Basic auth) count in `max_in_flight` only.
    """

    def __init__(self, open_sessions: Callable[[], int] = lambda: 0) -> None:
        self._open_sessions = open_sessions
        self.calls: Counter[tuple[str, str]] = Counter()
        #: the calls among them that carried Basic credentials (no session token)
        self.basic_auth_calls: Counter[tuple[str, str]] = Counter()
        self.responses: Counter[int] = Counter()
        self.faults_injected: Counter[str] = Counter()
        self.total_calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        #: session id -> its requests in progress (only sessions with at least one)
        self._session_in_flight: Counter[str] = Counter()
        self.max_sessions_in_flight = 0
        self.session_overlaps = 0
        self.sessions_created = 0
        self.sessions_deleted = 0
        self.sessions_expired = 0
        self.logins_failed = 0
        self.session_limit_rejections = 0
        self.writes_applied = 0
        self.tasks_created = 0
        self.open_connections = 0
        self.max_open_connections = 0
        self.connections_opened = 0

    @property
    def open_sessions(self) -> int:
        """Redfish sessions currently alive on this BMC."""
        return self._open_sessions()

    def count(self, method: str, template: str) -> int:
        """Calls seen for one `(method, path_template)`."""
        return self.calls[(method, template)]

    def request_started(self, method: str, template: str, session: str | None = None) -> None:
        """Record one request entering the handler; `session` is the id of the session it names."""
        self.calls[(method, template)] += 1
        self.total_calls += 1
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        if session is not None:
            self._session_in_flight[session] += 1
            active = len(self._session_in_flight)
            if active > 1:
                self.session_overlaps += 1
            if active > self.max_sessions_in_flight:
                self.max_sessions_in_flight = active

    def request_finished(self, status: int | None, session: str | None = None) -> None:
        """Record one request leaving the handler; `status` None means no response was sent."""
        self.in_flight -= 1
        self.responses[status if status is not None else 0] += 1
        if session is not None:
            self._session_in_flight[session] -= 1
            if self._session_in_flight[session] <= 0:
                del self._session_in_flight[session]

    def connection_opened(self) -> None:
        """Record a new TCP connection."""
        self.connections_opened += 1
        self.open_connections += 1
        if self.open_connections > self.max_open_connections:
            self.max_open_connections = self.open_connections

    def connection_closed(self) -> None:
        """Record a TCP connection going away."""
        self.open_connections = max(0, self.open_connections - 1)

    def reset(self) -> None:
        """Zero every counter; gauges (in flight, open connections) keep their live values."""
        self.calls.clear()
        self.basic_auth_calls.clear()
        self.responses.clear()
        self.faults_injected.clear()
        self.total_calls = 0
        self.max_in_flight = self.in_flight
        self.max_sessions_in_flight = len(self._session_in_flight)
        self.session_overlaps = 0
        self.max_open_connections = self.open_connections
        self.connections_opened = 0
        self.sessions_created = 0
        self.sessions_deleted = 0
        self.sessions_expired = 0
        self.logins_failed = 0
        self.session_limit_rejections = 0
        self.writes_applied = 0
        self.tasks_created = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly snapshot; `calls` keys are `"METHOD /path/template"`."""
        return {
            "total_calls": self.total_calls,
            "calls": {f"{m} {t}": n for (m, t), n in sorted(self.calls.items())},
            "responses": {str(code): n for code, n in sorted(self.responses.items())},
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "max_sessions_in_flight": self.max_sessions_in_flight,
            "session_overlaps": self.session_overlaps,
            "open_sessions": self.open_sessions,
            "sessions_created": self.sessions_created,
            "sessions_deleted": self.sessions_deleted,
            "sessions_expired": self.sessions_expired,
            "logins_failed": self.logins_failed,
            "session_limit_rejections": self.session_limit_rejections,
            "writes_applied": self.writes_applied,
            "tasks_created": self.tasks_created,
            "faults_injected": dict(sorted(self.faults_injected.items())),
            "open_connections": self.open_connections,
            "max_open_connections": self.max_open_connections,
            "connections_opened": self.connections_opened,
        }


def merge_stats(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """Fleet totals from per-BMC `to_dict()` snapshots (sums; `max_*` become the per-BMC maximum)."""
    total: dict[str, Any] = {"bmcs": len(snapshots)}
    for snap in snapshots:
        for key, value in snap.items():
            if isinstance(value, dict):
                bucket = total.setdefault(key, {})
                for sub, n in value.items():
                    bucket[sub] = bucket.get(sub, 0) + n
            elif key.startswith("max_"):
                total[key] = max(total.get(key, 0), value)
            else:
                total[key] = total.get(key, 0) + value
    return total
