"""Per-BMC reachability gauges (`devicectl devices health`): whether each device's last access
reached it, when it last did, since when it has failed, and its certificate's expiry. Loaded from
the database at start (`metrics.load_from_database`), then kept current by every completed request
(controller/execution/completions.py), the drift sweep and readiness verifications; the alerts
`DevicectlBMCUnreachable` and `DevicectlBMCCertificateExpiring` read them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import Gauge

BMC_UP = Gauge(
    "devicectl_bmc_up",
    "1 when the device's last access (a request or a drift sweep's check) reached it, else 0",
    ["device"],
)
BMC_LAST_SUCCESS = Gauge(
    "devicectl_bmc_last_success_timestamp_seconds",
    "When the device was last reached (Unix time)",
    ["device"],
)
BMC_INACCESSIBLE_SINCE = Gauge(
    "devicectl_bmc_inaccessible_since_timestamp_seconds",
    "Since when the device has failed every access (Unix time); no series while it is reachable",
    ["device"],
)
BMC_CERT_EXPIRY = Gauge(
    "devicectl_bmc_certificate_expiry_timestamp_seconds",
    "When the BMC's TLS certificate expires (notAfter, Unix time), from its last readiness verification",
    ["device"],
)


class BmcHealthGauges:
    """The per-device reachability gauges: loaded from the database at start (every device's last
    known health, not only what this process saw), then kept current by each access."""

    def __init__(self) -> None:
        self._down_since: dict[str, float] = {}

    def load(self, rows: Iterable[Any]) -> None:
        """Every row of `Store.bmc_health()`."""
        for row in rows:
            if row.last_success_at is not None:
                BMC_LAST_SUCCESS.labels(row.device).set(row.last_success_at.timestamp())
            if row.cert_not_after is not None:
                BMC_CERT_EXPIRY.labels(row.device).set(row.cert_not_after.timestamp())
            if row.inaccessible_since is not None:
                self._down(row.device, row.inaccessible_since.timestamp())
            elif row.last_success_at is not None or row.last_error_at is not None:  # reached
                self._up(row.device, (row.last_success_at or row.last_error_at).timestamp())

    def record(self, device: str, error: str, at: float | None = None, *, answered: bool = False) -> None:
        """One access: reached (`error` empty, or `answered`: the device answered with an error,
        a 503) or not."""
        now = time.time() if at is None else at
        if answered and error:
            self._up(device, now)
        elif error:
            self._down(device, self._down_since.get(device, now))
        else:
            BMC_LAST_SUCCESS.labels(device).set(now)
            self._up(device, now)

    def certificate(self, device: str, not_after: float) -> None:
        BMC_CERT_EXPIRY.labels(device).set(not_after)

    def _down(self, device: str, since: float) -> None:
        self._down_since[device] = since
        BMC_UP.labels(device).set(0)
        BMC_INACCESSIBLE_SINCE.labels(device).set(since)

    def _up(self, device: str, _at: float) -> None:
        self._down_since.pop(device, None)
        BMC_UP.labels(device).set(1)
        with contextlib.suppress(KeyError):
            BMC_INACCESSIBLE_SINCE.remove(device)


BMC_HEALTH = BmcHealthGauges()
