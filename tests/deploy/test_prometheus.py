"""The metrics as an SRE meets them: `promtool check metrics` on a real scrape, and every query of
the Grafana dashboard evaluated by a real Prometheus scraping a running controller.

Both tools come from Debian's `prometheus` package (.ci/run installs it in CI); without them these
tests skip with a message saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from asyncio.subprocess import PIPE, STDOUT
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bench.ports import free_port as _free_port
from bmcsim import SimulatorFleet
from controller.inventory import load_inventory
from tests.controller.observability.test_metrics import gpu_caps, scrape

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "devicectl.json"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
#: the dashboard's template variables as Grafana's "All" expands them in a regex matcher
VARIABLES = {"$device": ".*", "${device}": ".*", "$namespace": ".*", "$job": ".*"}


def _require(tool: str | None, name: str) -> str:
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing in CI: .ci/run installs Debian's prometheus package")
        pytest.skip(f"{name} not installed (Debian package `prometheus`); CI installs it")
    return tool


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for variable in board.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, str) and (m := re.fullmatch(r"label_values\((.+), *\w+\)", query)):
            queries.append(m.group(1))  # the series a label_values() variable reads
    out = []
    for query in queries:
        for name, value in VARIABLES.items():
            query = query.replace(name, value)
        out.append(query)
    return out


def exported(text: str) -> set[str]:
    """Names of the series a scrape holds samples of."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}


@pytest.fixture
async def redfish_controller(
    start_controller: Any, sink: Any, tmp_path: Path
) -> AsyncIterator[tuple[int, str]]:
    """A controller serving two simulated GB200 BMCs over real HTTPS (the Redfish plugin in
    process, so its `devicectl_bmc_*` metrics are exported), after three GPU caps; yields its
    metrics port and a scrape."""
    async with SimulatorFleet(n=2, model="gb200", cert_dir=tmp_path / "tls") as fleet:
        secrets = fleet.write_inventory(tmp_path / "inventory.toml", tmp_path / "secrets")
        h = await start_controller(
            load_inventory(tmp_path / "inventory.toml"),
            secrets_dir=str(secrets),
            metrics_listen="127.0.0.1:0",
            metrics_per_device=True,
        )
        for i, watts in enumerate((500, 450, 520)):
            await h.stub.SendDeviceRequest(gpu_caps(f"node00{i % 2 + 1}", f"p-{i}", {0: watts}))
        await sink.wait_for({"p-0", "p-1", "p-2"}, timeout=30)
        for rid in ("p-0", "p-1", "p-2"):
            assert all(r.ok for r in sink.unique()[rid].gpu_policies_update.results), sink.unique()[rid]
        port = h.controller.metrics_server.port
        status, text = await scrape(port)
        assert status == 200
        yield port, text
        await h.controller.stop(grace=1.0)  # logs out of the BMCs while they still answer


async def test_promtool_accepts_a_real_scrape(redfish_controller: tuple[int, str]) -> None:
    promtool = _require(PROMTOOL, "promtool")
    _, text = redfish_controller
    proc = await asyncio.create_subprocess_exec(
        promtool, "check", "metrics", stdin=PIPE, stdout=PIPE, stderr=STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(text.encode()), 30)
    # promtool prints each lint problem (and exits 1); a clean scrape prints nothing
    assert proc.returncode == 0 and out.decode().strip() == "", out.decode()
    names = exported(text)
    assert not [n for n in names if n.endswith("_created")], "no *_created series"
    build = [line for line in text.splitlines() if line.startswith("devicectl_build_info{")]
    assert len(build) == 1 and build[0].endswith(" 1.0") and 'version="' in build[0], build
    # BMC call latency by method and outcome only: no BMC address, no platform
    latency = re.findall(r"^devicectl_bmc_request_duration_seconds_count\{(.*)\} (\S+)$", text, re.M)
    assert latency and all(re.fullmatch(r'method="\w+",outcome="\w+"', labels) for labels, _ in latency)
    assert 'method="PATCH",outcome="ok"' in dict(latency), latency
    # both halves of the dashboard's power panel: this test's two devices have both gauges
    series = {
        (gauge, labels): float(value)
        for gauge, labels, value in re.findall(
            r"^devicectl_power_limit_(requested|enforced)_watts\{(.*)\} (\S+)$", text, re.M
        )
        if 'device="node00' in labels
    }
    # the Redfish plugin reports no requested value when the BMC enforces what was asked
    for device, watts in (("node001", 520.0), ("node002", 450.0)):
        labels = f'component="gpu/0",device="{device}"'
        assert series[("requested", labels)] == series[("enforced", labels)] == watts, series


@pytest.fixture
async def prometheus(tmp_path: Path) -> AsyncIterator[Any]:
    """A factory: `await prometheus(*target_ports, rule_files=())` starts a real Prometheus
    scraping those ports every second (job `devicectl`) and evaluating the rule files every second,
    on a free loopback port, and returns its base URL; it is stopped after the test."""
    binary = _require(PROMETHEUS, "prometheus")
    procs: list[asyncio.subprocess.Process] = []

    async def start(*targets: int, rule_files: Sequence[Path] = ()) -> str:
        port = _free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(f) for f in rule_files],
                    "scrape_configs": [
                        {
                            "job_name": "devicectl",
                            "static_configs": [{"targets": [f"127.0.0.1:{t}" for t in targets]}],
                        }
                    ],
                }
            )
        )
        proc = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=PIPE,  # a few lines at most at level warn
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        async with asyncio.timeout(30), aiohttp.ClientSession() as http:
            while True:
                if proc.returncode is not None:
                    raise AssertionError(await proc.stderr.read() if proc.stderr else proc.returncode)
                try:
                    async with http.get(f"{url}/-/ready") as reply:
                        if reply.status == 200:
                            return url
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)

    yield start
    for proc in procs:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _query(http: aiohttp.ClientSession, url: str, expr: str) -> dict[str, Any]:
    async with http.get(f"{url}/api/v1/query", params={"query": expr}) as reply:
        body: dict[str, Any] = await reply.json()
        return body


async def test_every_dashboard_query_runs_on_a_real_prometheus(
    redfish_controller: tuple[int, str], prometheus: Any
) -> None:
    port, text = redfish_controller
    url = await prometheus(port)
    names = exported(text)
    queries = dashboard_queries()
    assert len(queries) >= 20
    # a query must return data when every series it reads has samples (rates need two scrapes)
    # (the unreachable-BMC panel is empty while every BMC answers, whatever series exist)
    maybe_empty = ("devicectl_plugin_restarts_total", "devicectl_bmc_up", "devicectl_bmc_inaccessible_since")
    expected = {
        q
        for q in queries
        if set(re.findall(r"devicectl_\w+", q)) <= names and not any(m in q for m in maybe_empty)
    }
    for wanted in (
        "requested_watts",
        "power_limit_watts",
        "bmc_request_duration_seconds",
        "build_info",
        "bmc_requests_total",
    ):
        assert any(wanted in q for q in expected), f"no dashboard query on {wanted} has samples"
    results: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession() as http, asyncio.timeout(45):
        while True:
            for expr in queries:
                results[expr] = await _query(http, url, expr)
            if all(results[q].get("data", {}).get("result") for q in expected):
                break
            await asyncio.sleep(0.5)  # the event loop keeps serving the scrapes meanwhile
    for expr, body in results.items():
        assert body["status"] == "success", (expr, body)  # valid PromQL with no warnings of error
        assert not body.get("warnings"), (expr, body)
    empty = sorted(q for q in queries if not results[q]["data"]["result"])
    # what may be empty: out-of-process plugins' restarts (this controller runs its plugin in
    # process), and the unreachable BMCs (none here; test_bmc_health has one)
    assert all(any(m in q for m in maybe_empty) for q in empty), empty
    up = await _query_up(url)
    assert up == 1.0


async def _query_up(url: str) -> float:
    async with aiohttp.ClientSession() as http:
        body = await _query(http, url, 'up{job="devicectl"}')
    return float(body["data"]["result"][0]["value"][1])


def test_the_dashboard_picks_a_namespace_and_job_and_shows_every_power_limit() -> None:
    board = json.loads(DASHBOARD.read_text())
    names = [v["name"] for v in board["templating"]["list"]]
    assert names[:3] == ["datasource", "namespace", "job"]
    for panel in board["panels"]:
        for target in panel["targets"]:
            for selector in re.findall(r"devicectl_\w+(\{[^}]*\})?", target["expr"]):
                assert 'namespace=~"$namespace"' in selector and 'job=~"$job"' in selector, target["expr"]
    limits = [
        p for p in board["panels"] if any("devicectl_power_limit_watts" in t["expr"] for t in p["targets"])
    ]
    assert limits and "{{kind}}" in limits[0]["targets"][0]["legendFormat"]
