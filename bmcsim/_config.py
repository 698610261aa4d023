"""Per-BMC settings of the simulator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: password of the simulated BMC user unless the caller configures one
DEFAULT_PASSWORD = "bmc-sim-password"


@dataclass
class BmcConfig:
    """Settings of one simulated BMC. `latency`, `async_writes` and `task_delay` may change at runtime.

    Attributes:
        model: platform model: "gb200" (synthetic writable tray), "dmtf", "dmtf-legacy", an NVIDIA
            mockup ("gb200-nvl", "gb200-nvl-gpu-caps", "gh200", "dgx-h100", "dgx-h100-gpu-caps",
            "hgx-h100", "hgx-b200"), a real
            layout, or
            "capture:DIR" / "mockup:DIR".
        username: the BMC account.
        password: its password (never logged).
        session_limit: Redfish sessions allowed at once; one more login gets 503 SessionLimitExceeded.
        session_timeout: seconds of inactivity before a session expires.
        latency: seconds added to every request.
        async_writes: PATCH on caps answers 202 + task instead of 200.
        task_delay: seconds a task stays Running before its write lands.
        firmware_version: reported BMC firmware; None uses the model's default.
        profile: "default", or "bmcweb" to behave like OpenBMC bmcweb where it matters: ETags are
            a hash of the whole body (live readings included) and `If-Match` is checked against a
            fresh GET; a 202's task monitor is `TaskService/TaskMonitors/{id}` with `Retry-After: 30`,
            answering 202 while running, 204 once when done (failed or not), then 404.
        task_failure: when set, asynchronous writes fail: the task ends `Exception` with this
            message and nothing is applied.
        allow_list: `(method, path pattern)` pairs (`*` = one path segment) a BMC proxy lets
            through; anything else is answered 403. None lets everything through.
        layout: layout variants (see `LAYOUTS`).
        control_quirk: "automatic" makes Controls accept caps only in `ControlMode: Automatic`
            (HPE Cray EX style; `ControlMode@Redfish.AllowableValues` says so).
        session_context: what a login's `Context` meets: "keep" (stored and shown on the
            session, DMTF Session v1_5_0+, bmcweb since bb759e3), "drop" (ignored, as firmware
            that does not show it does), "reject" (400 `PropertyUnknown` naming it, as bmcweb before bb759e3,
            2022-08, answered: its session POST read only UserName, Password and Oem).
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
    profile: str = "default"
    task_failure: str | None = None
    allow_list: tuple[tuple[str, str], ...] | None = None
    layout: frozenset[str] = field(default_factory=frozenset)
    control_quirk: str | None = None
    session_context: str = "keep"


PROFILES = ("default", "bmcweb")
SESSION_CONTEXT = ("keep", "drop", "reject")
#: layout variants seen in DMTF's public mockups and real firmware
LAYOUTS = (
    "no-em-link",  # dmtf: the chassis has no EnvironmentMetrics link (and the resource is absent)
    "capacity-0",  # dmtf/dmtf-legacy: PowerControl PowerCapacityWatts is 0 ("not reported")
    "smartnic",  # dmtf/dmtf-legacy: a second ComputerSystem (a SmartNIC's SoC) with its own ARM CPU
    "multi-chassis",  # dmtf/dmtf-legacy: an enclosure chassis (with its own cap) listed first
    "absent-readings",  # every power reading omitted (PowerWatts, Sensor, PowerConsumedWatts)
    "no-bounds",  # no AllowableMin/AllowableMax/PowerCapacityWatts anywhere
)

#: `SimulatedBmc.configure` keys handled by `checked`
BEHAVIOUR = ("profile", "layout", "task_failure", "allow_list", "control_quirk", "session_context")


def checked(key: str, value: Any) -> Any:
    """A behaviour setting's value, validated (ValueError names the choices)."""
    if key == "profile" and value not in PROFILES:
        raise ValueError(f"unknown profile {value!r}; choose from {', '.join(PROFILES)}")
    if key == "layout":
        unknown = set(value) - set(LAYOUTS)
        if unknown:
            raise ValueError(f"unknown layout variant(s) {sorted(unknown)}; choose from {LAYOUTS}")
        return frozenset(value)
    if key == "session_context" and value not in SESSION_CONTEXT:
        raise ValueError(f"unknown session_context {value!r}; choose from {', '.join(SESSION_CONTEXT)}")
    if key == "control_quirk" and value not in (None, "automatic"):
        raise ValueError(f"unknown control_quirk {value!r}; choose from None, 'automatic'")
    return value
