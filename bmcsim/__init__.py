"""Everything that imitates or records a BMC: simulated Redfish BMCs over HTTPS (for tests, the demo
and benchmarks of the Redfish plugin) and the read-only capture of a real one. The plugin never imports
this package; the controller's `bmc-sim`, `bmc-capture`, `demo` and `certs` commands load it lazily.

One process serves many BMCs (one TLS listening socket each, all in one asyncio loop). Models:

- ``gb200``: a synthetic writable tray shaped like NVIDIA's (EnvironmentMetrics caps on GPUs, CPUs and
  modules; WPPS profiles): the generic writable model of the controller's tests, NOT what GB200
  firmware serves (its module and GPU limits are assumptions; see ``gb200-nvl``)
- ``dmtf``: generic DMTF server (``Chassis/1/Controls`` and legacy ``Chassis/1/Power``)
- ``dmtf-legacy``: only the legacy ``Power`` resource
- NVIDIA platforms as mockup data (``bmcsim/mockups/<folder>``, every resource's source in its
  ``SOURCES.md``, rebuilt by ``bmcsim/mockups/build.py``), served by the replay engine:
  ``gb200-nvl`` (GB200 NVL compute tray, firmware whose modules and GPUs offer no limit),
  ``gb200-nvl-gpu-caps`` (the same tray, firmware whose GPUs offer ``PowerLimitWatts``), ``gh200``
  (module limits that are the Grace CPUs' EDPp controls, no node limit) and ``dgx-h100`` (AMI host
  BMC + HGX H100 board: GPU readings, no limits, host CPUs without EnvironmentMetrics; and
  ``dgx-h100-gpu-caps``, HGX firmware whose GPUs offer ``PowerLimitWatts``), ``hgx-h100`` and
  ``hgx-b200`` (an HGX baseboard as its own BMC serves it: the H100 board's GPUs offer no limit, the
  B200 board's 200..1000 W)

Each BMC can also behave like OpenBMC bmcweb (``profile="bmcweb"``: body-hash ETags over drifting
readings, task monitors with ``Retry-After: 30``), sit behind NVIDIA's DPS proxy (``allow_list=
DPS_ALLOW_LIST``), fail its tasks (``task_failure``), cap only in ``Automatic`` (``control_quirk``)
and take layout variants (``BmcConfig(layout=...)``, see ``LAYOUTS``).

Modules. The serving: one BMC's socket, request pipeline and knobs (`_bmc`), its HTTP side (`_http`),
many BMCs in one loop (`_fleet`), the per-BMC settings (`_config`), the private CA and certificates
(`tls`, public: the controller's `certs` command makes certificates with it), the command line (`cli`,
`__main__`), the plain-HTTP control port for other processes
(`_control`), counters (`_stats`), runtime fault injection (`_faults`), and the inventory and secrets
files of a fleet (`_inventory`). The Redfish service every model shares: resource routing (`_routing`),
`$metadata`, standard headers and request checks (`_protocol`), service root, sessions, tasks and
managers (`_common`), the session table (`_sessions`), tasks and their monitors (`_tasks`), accounts as
data (`_account_store`) and the AccountService with its roles (`_accounts`), error replies (`_errors`)
and message bodies (`_messages`), and what bmcweb or a BMC proxy changes (`_bmcweb`). The models: their
registry (`_platforms`, with the NVIDIA mockups), the synthetic writable tray (`_gb200`, its writes
`_gb200_writes`, workload power profiles `_wpps`), generic DMTF servers (`_dmtf`, their state
`_dmtf_state`, the legacy Power resource `_dmtf_power`), the layout variants (`_layouts`) and the
caps, meters and load curve they share (`_state`). Captures: the read-only walk of a real BMC
(`capture`), served again with mockups (`_replay`) under the vendors' write rules (`_vendor_writes`).

Typical use::

    async with SimulatorFleet(n=16, model="gb200", cert_dir=tmp_path) as fleet:
        bmc = fleet.bmcs[0]
        bmc.faults.set("nvidia-busy", writes_only=True, count=1)
        ...
        assert bmc.state.caps["GPU_0"].set_point == 700
"""

from bmcsim._bmc import SimulatedBmc
from bmcsim._bmcweb import DPS_ALLOW_LIST
from bmcsim._config import DEFAULT_PASSWORD, LAYOUTS, PROFILES, BmcConfig
from bmcsim._faults import FaultMode, Faults
from bmcsim._fleet import SimulatorFleet
from bmcsim._inventory import (
    InventoryEntry,
    device_id,
    render_inventory,
    write_inventory,
    write_secrets,
)
from bmcsim._platforms import MODELS, REAL_LAYOUTS, get_platform
from bmcsim._state import Cap
from bmcsim._stats import UNMATCHED, BmcStats
from bmcsim._wpps import SUPPORTED_MASK, ProfileState, format_mask
from bmcsim.tls import TlsFiles, ensure_tls_files

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
