"""Simulated Redfish BMCs over HTTPS, for tests, the demo and benchmarks of the Redfish plugin.

One process serves many BMCs (one TLS listening socket each, all in one asyncio loop). Models:

- ``gb200``: NVIDIA GB200 NVL tray (EnvironmentMetrics caps on GPUs, CPUs and modules; WPPS profiles)
- ``dmtf``: generic DMTF server (``Chassis/1/Controls`` and legacy ``Chassis/1/Power``)
- ``dmtf-legacy``: only the legacy ``Power`` resource
- ``dgx-h100``: Node Manager platform with read-only GPU metrics

Each BMC can also behave like OpenBMC bmcweb (``profile="bmcweb"``: body-hash ETags over drifting
readings, task monitors with ``Retry-After: 30``), sit behind NVIDIA's DPS proxy (``allow_list=
DPS_ALLOW_LIST``), fail its tasks (``task_failure``), cap only in ``Automatic`` (``control_quirk``)
and take layout variants (``BmcConfig(layout=...)``, see ``LAYOUTS``).

Typical use::

    async with SimulatorFleet(n=16, model="gb200", cert_dir=tmp_path) as fleet:
        bmc = fleet.bmcs[0]
        bmc.faults.set("nvidia-busy", writes_only=True, count=1)
        ...
        assert bmc.state.caps["GPU_0"].set_point == 700
"""

from plugins.redfish.simulator._bmc import SimulatedBmc
from plugins.redfish.simulator._bmcweb import DPS_ALLOW_LIST
from plugins.redfish.simulator._config import DEFAULT_PASSWORD, LAYOUTS, PROFILES, BmcConfig
from plugins.redfish.simulator._faults import FaultMode, Faults
from plugins.redfish.simulator._fleet import SimulatorFleet
from plugins.redfish.simulator._inventory import (
    InventoryEntry,
    device_id,
    render_inventory,
    write_inventory,
    write_secrets,
)
from plugins.redfish.simulator._platforms import MODELS, REAL_LAYOUTS, get_platform
from plugins.redfish.simulator._state import Cap
from plugins.redfish.simulator._stats import UNMATCHED, BmcStats
from plugins.redfish.simulator._tls import TlsFiles, ensure_tls_files
from plugins.redfish.simulator._wpps import SUPPORTED_MASK, ProfileState, format_mask

__all__ = [
    "DEFAULT_PASSWORD",
    "DPS_ALLOW_LIST",
    "LAYOUTS",
    "MODELS",
    "PROFILES",
    "REAL_LAYOUTS",
    "SUPPORTED_MASK",
    "UNMATCHED",
    "BmcConfig",
    "BmcStats",
    "Cap",
    "FaultMode",
    "Faults",
    "InventoryEntry",
    "ProfileState",
    "SimulatedBmc",
    "SimulatorFleet",
    "TlsFiles",
    "device_id",
    "ensure_tls_files",
    "format_mask",
    "get_platform",
    "render_inventory",
    "write_inventory",
    "write_secrets",
]
