"""The fan-out benchmark's out-of-process variant measures real work through the extra hop."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.fanout import run_fanout
from bench.fanout_plan import EXPECTED_WRITES, QUICK_FANOUT


async def test_fanout_with_the_redfish_plugin_in_its_own_process(tmp_path: Path) -> None:
    config = replace(QUICK_FANOUT, plugin_process=True, baseline=False)
    (size,) = (await run_fanout(config, tmp_path))["sizes"]
    for phase in size["phases"]:
        assert phase["problems"] == [] and phase["responses"] == 3 and phase["failures"] == 0
        assert phase["writes_per_bmc_min"] == phase["writes_per_bmc_max"] == EXPECTED_WRITES
        # the BMC work happened in the plugin process, and its CPU is counted with the controller's
        assert phase["plugin_process_cpu_s"] > 0
        assert phase["controller_cpu_s"] > phase["plugin_process_cpu_s"]
    assert (tmp_path / "fanout-3" / "inventory-plugin-process.toml").read_text().count("[[plugin]]") == 1
