"""State of the generic DMTF models: a node cap (initially disabled) and optional per-CPU caps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bmcsim._state import Cap, PlatformState

if TYPE_CHECKING:
    from bmcsim._routing import Bmc

CHASSIS = "/redfish/v1/Chassis/1"
SYSTEM = "/redfish/v1/Systems/1"
NODE_CAP = "PowerLimit"
CPUS = ("CPU1", "CPU2")
NODE_LIMITS, CPU_LIMITS = (200, 1200), (100, 350)
# memory, disks, fans and NICs: node power the CPU caps do not cover
_PLATFORM_BASE_W = 220.0


def cpu_cap_name(cpu: str) -> str:
    """Control id of a CPU's cap, e.g. "CPU1_PowerLimit"."""
    return f"{cpu}_PowerLimit"


class DmtfState(PlatformState):
    """A node cap (initially disabled) and, with `cpu_caps`, two CPU caps at their default."""

    def __init__(self, seed: int, *, cpu_caps: bool = True) -> None:
        super().__init__(seed)
        self.caps[NODE_CAP] = Cap(NODE_CAP, *NODE_LIMITS, set_point=None, control_mode="Disabled")
        if cpu_caps:
            for cpu in CPUS:
                name = cpu_cap_name(cpu)
                self.caps[name] = Cap(name, *CPU_LIMITS, set_point=CPU_LIMITS[1], default=CPU_LIMITS[1])

    @property
    def node_cap(self) -> Cap:
        """The node (chassis) power cap shared by `Controls/PowerLimit` and legacy `Power`."""
        return self.caps[NODE_CAP]

    def readings(self, t: float) -> dict[str, float]:
        """CPU and node ("node") power at time `t`, kept under the node cap when one is set."""
        power: dict[str, float] = {}
        for cpu in CPUS:
            cap = self.caps.get(cpu_cap_name(cpu))
            limit = cap.effective() if cap is not None else float(CPU_LIMITS[1])
            power[cpu] = 0.85 * limit * self.load(cpu, t)
        node = sum(power.values()) + _PLATFORM_BASE_W * (0.9 + 0.2 * self.load("base", t))
        node_cap = self.node_cap
        if node_cap.set_point is not None and node > 0.97 * node_cap.set_point:
            factor = 0.97 * node_cap.set_point / node
            power = {cpu: w * factor for cpu, w in power.items()}
            node *= factor
        power["node"] = node
        return power


def legacy_state(seed: int) -> DmtfState:
    """State of `dmtf-legacy`: only the node cap."""
    return DmtfState(seed, cpu_caps=False)


def dmtf_state(bmc: Bmc) -> DmtfState:
    """The BMC's state as a `DmtfState`."""
    assert isinstance(bmc.state, DmtfState)
    return bmc.state
