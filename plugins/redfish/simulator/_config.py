"""Per-BMC settings of the simulator."""

from __future__ import annotations

from dataclasses import dataclass

#: password of the simulated BMC user unless the caller configures one
DEFAULT_PASSWORD = "bmc-sim-password"


@dataclass
class BmcConfig:
    """Settings of one simulated BMC. `latency`, `async_writes` and `task_delay` may change at runtime.

    Attributes:
        model: platform model: "gb200", "dmtf", "dmtf-legacy" or "dgx-h100".
        username: the BMC account.
        password: its password (never logged).
        session_limit: Redfish sessions allowed at once; one more login gets 503 SessionLimitExceeded.
        session_timeout: seconds of inactivity before a session expires.
        latency: seconds added to every request.
        async_writes: PATCH on caps answers 202 + task instead of 200.
        task_delay: seconds a task stays Running before its write lands.
        firmware_version: reported BMC firmware; None uses the model's default.
    """

    model: str = "gb200"
    username: str = "admin"
    password: str = DEFAULT_PASSWORD
    session_limit: int = 4
    session_timeout: float = 1800.0
    latency: float = 0.0
    async_writes: bool = False
    task_delay: float = 1.0
    firmware_version: str | None = None
