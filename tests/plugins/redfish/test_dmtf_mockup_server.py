"""DMTF's own Redfish-Mockup-Server (github.com/DMTF/Redfish-Mockup-Server) serving a sourced NVIDIA
mockup in which one linked resource is missing: reads answer with the rest, naming what is absent,
and GPU caps land and are restored exactly.

The server is not published on PyPI, so nothing installs it here or in CI: point
DEVICECTL_DMTF_MOCKUP_SERVER at its `redfishMockupServer.py` (and run with a Python that has its
`requests` and `grequests`, or name one in DEVICECTL_DMTF_MOCKUP_PYTHON) to run this test. The
scripted peer in test_http_unclean_close.py follows that server's source for the framing rules and
runs everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.ports import free_port
from bmcsim import TlsFiles, ensure_tls_files
from bmcsim._platforms import MOCKUP_DIR
from plugins.base import DeviceContext, GpuMetricsQuery, PolicyAction, PolicyChange
from tests.plugins.redfish.corpus.cases import policy

SERVER = os.environ.get("DEVICECTL_DMTF_MOCKUP_SERVER", "")
PYTHON = os.environ.get("DEVICECTL_DMTF_MOCKUP_PYTHON", sys.executable)
AUTO = {"Model": "auto", "Name": "hgx"}
GPU_EM = "/redfish/v1/Systems/HGX_Baseboard_0/Processors/GPU_SXM_{}/EnvironmentMetrics"
MISSING = "Chassis/HGX_GPU_SXM_8"  # linked from the Chassis collection and from GPU_SXM_8


@dataclasses.dataclass
class DmtfServer:
    url: str
    root: Path


@pytest.fixture
def dmtf_server(sim_certs: Path, tmp_path: Path) -> Iterator[DmtfServer]:
    if not SERVER or not Path(SERVER).is_file():
        pytest.skip(
            "DMTF's Redfish-Mockup-Server is not on PyPI: set DEVICECTL_DMTF_MOCKUP_SERVER to its "
            "redfishMockupServer.py (github.com/DMTF/Redfish-Mockup-Server) to run this test"
        )
    root = tmp_path / "mockup"
    shutil.copytree(MOCKUP_DIR / "nvidia-hgx-b200", root)
    shutil.rmtree(root / MISSING)
    tls = ensure_tls_files(sim_certs)
    port = free_port()
    args = [PYTHON, SERVER, "-S", "-D", str(root), "-H", "127.0.0.1", "-p", str(port)]
    args += ["-s", "--cert", str(tls.cert), "--key", str(tls.key)]
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(args, cwd=Path(SERVER).parent, stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    try:
        for _ in range(100):
            if proc.poll() is not None:
                pytest.fail(f"the mockup server exited: {(tmp_path / 'server.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{url}/redfish/v1", context=tls.client_context(), timeout=1)
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        yield DmtfServer(url, root)
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _set_points(server: DmtfServer, tls: TlsFiles) -> list[int]:
    points = []
    for n in range(1, 9):
        url = server.url + GPU_EM.format(n)
        with urllib.request.urlopen(url, context=tls.client_context(), timeout=5) as reply:
            points.append(json.load(reply)["PowerLimitWatts"]["SetPoint"])
    return points


def _at(ctx: DeviceContext, url: str) -> DeviceContext:
    return dataclasses.replace(ctx, endpoint=dataclasses.replace(ctx.endpoint, url=url))


async def test_dmtfs_server_with_a_missing_linked_resource_reads_and_caps(
    dmtf_server: DmtfServer, make_harness: Callable[..., Any], sim_certs: Path
) -> None:
    tls = ensure_tls_files(sim_certs)
    async with make_harness(n=1, model="hgx-b200") as h:
        # the mockup serves no SessionService: HTTP Basic, as an operator sets it for such a BMC
        ctx = _at(h.ctx(h.fleet.bmcs[0], model=AUTO, options={"auth": "basic"}), dmtf_server.url)
        reads = await h.plugin.gpu_metrics(ctx, GpuMetricsQuery())
        assert reads.result.ok, reads.result
        assert [round(u.watts, 3) for u in reads.result.metrics] == [64.388] * 8

        out = await h.plugin.set_policy(ctx, PolicyChange(PolicyAction.SET, policy(gpu=4000)))
        assert out.result.ok, out.result.error
        assert _set_points(dmtf_server, tls) == [500] * 8  # what DMTF's server now serves

        back = await h.plugin.set_policy(
            dataclasses.replace(ctx, state=out.state), PolicyChange(PolicyAction.UNSET, None)
        )
        assert back.result.ok, back.result.error
        assert _set_points(dmtf_server, tls) == [700] * 8  # each GPU's prior, exactly
        await h.plugin.close()
