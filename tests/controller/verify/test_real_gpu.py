"""In-band vs out-of-band against a real NVIDIA driver (read-only): the enforced limits NVML reports
for the local GPUs are compared with what a simulated BMC holds for the same GPUs, set apart on
purpose, and every GPU is flagged with both values. Skipped where NVML does not initialise; every
mutating NVML function raises meanwhile (`forbid_writes`). Run with
`pytest -m gpu tests/controller/verify`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bmcsim import SimulatorFleet
from bmcsim._gb200_writes import cap_write
from controller.desired.limits import enforced_from
from plugins.base import DeviceContext, Empty, HealthQuery
from plugins.nvml import NvmlLibrary, NvmlPlugin
from plugins.nvml.testing import forbid_writes
from plugins.redfish import RedfishPlugin
from tests.plugins.nvml.test_real_gpu import _real_nvml_available
from tests.plugins.redfish.harness import Harness

pytestmark = pytest.mark.gpu


async def test_the_real_drivers_limits_against_a_bmc_holding_others_are_flagged(tmp_path: Path) -> None:
    reason = _real_nvml_available()
    if reason:
        pytest.skip(reason)
    with forbid_writes() as refused:
        nvml = NvmlPlugin(NvmlLibrary())
        await nvml.start()
        try:
            out = await nvml.std_metrics(DeviceContext(device_id="local-gpus"), Empty())
        finally:
            await nvml.close()
    assert not refused, f"a read-only check tried to write: {refused}"
    assert out.result.ok, out.result.error
    enforced = {
        int(k.split("/")[1]): w for k, w in enforced_from(out.result).items() if k.startswith("gpu/") and w
    }
    assert enforced, "the driver reports no enforced GPU limit"
    async with SimulatorFleet(n=1, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        bmc = fleet.bmcs[0]
        gpus = sorted(enforced)[:4]  # the simulated GB200 tray has 4 GPUs
        for i in gpus:  # the BMC holds another limit than the driver enforces
            cap = bmc.state.caps[f"GPU_{i}"]
            cap_write(cap, max(cap.allow_min, min(cap.allow_max, round(enforced[i]) - 100)), None).apply()
        plugin = RedfishPlugin()
        await plugin.start()
        try:
            h = Harness(fleet, plugin)
            limits = {i: float(enforced[i]) for i in gpus}
            query = HealthQuery(inband_gpu_limits=limits, telemetry_interval_ms=10, latency_samples=3)
            result = (await h.call("bmc_health", bmc, query)).result
        finally:
            await plugin.close()
    inband = next(c for c in result.checks if c.name == "inband")
    assert inband.status == "warn", inband
    for i in gpus:
        held = bmc.state.caps[f"GPU_{i}"].set_point
        assert f"GPU {i}: NVML enforces {enforced[i]:g} W, the BMC holds {held:g} W" in inband.detail
