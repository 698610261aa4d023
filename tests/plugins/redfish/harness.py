"""Redfish plugin test helpers: simulated BMCs plus a plugin, with device state kept per device."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from bmcsim import SimulatedBmc, SimulatorFleet
from plugins.base import Credentials, DeviceContext, Endpoint, Outcome
from plugins.redfish import RedfishPlugin

#: fast back-offs so fault tests take milliseconds, not the production minutes
FAST: dict[str, Any] = {
    "busy_backoff": 0.05,
    "retry_backoff": 0.01,
    "connect_timeout": 1.0,
    "read_timeout": 2.0,
    "task_poll_interval": 0.05,
    "verify_after": 0.0,
}

_DMTF_SPEC = {
    "minLoadWatts": 200,
    "maxLoadWatts": 1200,
    "devices": [
        {"type": "CPU", "model": "Contoso CPU", "count": 2, "minLoadWatts": 100, "maxLoadWatts": 350}
    ],
}


def model_json(bmc: SimulatedBmc, *, auto: bool = False) -> dict[str, Any]:
    """The device model JSON the topology would send for a simulated BMC."""
    name = f"node{bmc.index}"
    if bmc.model in ("GENERIC_DMTF", "GENERIC_DMTF_LEGACY"):
        return {"Model": "auto" if auto else bmc.model, "Name": name, "spec": _DMTF_SPEC}
    if auto:
        return {"Model": "auto", "Name": name, "spec": {"devices": [{"type": "GPU", "count": 4}]}}
    return {"Model": bmc.model, "Name": name}


class Harness:
    """A fleet plus a plugin; keeps each device's state between calls like the controller does."""

    def __init__(self, fleet: SimulatorFleet, plugin: RedfishPlugin) -> None:
        self.fleet = fleet
        self.plugin = plugin
        self.states: dict[int, Mapping[str, Any]] = {}
        self.options: dict[str, Any] = dict(FAST)

    def ctx(
        self,
        bmc: SimulatedBmc,
        *,
        timeout: float = 10.0,
        options: Mapping[str, Any] | None = None,
        model: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        ca_bundle: str | bool | None = True,
        verify_tls: bool = True,
        password: str | None = None,
    ) -> DeviceContext:
        """A device context for `bmc` (CA bundle from the fleet unless told otherwise)."""
        bundle = str(self.fleet.ca_bundle) if ca_bundle is True else (ca_bundle or None)
        return DeviceContext(
            device_id=f"node{bmc.index}",
            model=model if model is not None else model_json(bmc),
            endpoint=Endpoint(
                url=bmc.url,
                credentials=Credentials(bmc.username, password if password is not None else bmc.password),
                verify_tls=verify_tls,
                ca_bundle=bundle,  # type: ignore[arg-type]
                options={**self.options, **(options or {})},
            ),
            request_id=f"req-{time.monotonic_ns()}",
            deadline=time.monotonic() + timeout,
            state=state if state is not None else self.states.get(bmc.index, {}),
        )

    async def call(self, method: str, bmc: SimulatedBmc, request: Any, **kw: Any) -> Outcome[Any]:
        """Run one plugin operation and keep the returned state (None keeps the stored one)."""
        outcome: Outcome[Any] = await getattr(self.plugin, method)(self.ctx(bmc, **kw), request)
        for client in self.plugin.pool.clients():  # the sweep after a first login runs apart
            await client.settled()
        if outcome.state is not None:
            self.states[bmc.index] = outcome.state
        return outcome

    def calls(self, bmc: SimulatedBmc) -> dict[str, int]:
        """The BMC's calls since the last reset, as {"METHOD /template": n}."""
        return {f"{m} {t}": n for (m, t), n in sorted(bmc.stats.calls.items())}

    def reset(self) -> None:
        """Zero every BMC's counters."""
        self.fleet.reset_stats()
