"""Counting right with several processes: a real Prometheus scrapes a real `devicectl serve
--workers 2` on PostgreSQL (the front end and both executors), the topology sink is killed and
five responses wait undelivered. The dashboard's backlog query says 5, not 5 x 3: database-wide
gauges are exported once per front end, and the dashboard reads them with `max`
(controller/observability/endpoint.py). The shipped receiver-down alert, evaluated by that
Prometheus with a short `for:`, goes pending and then fires after the sink dies.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from sqlalchemy.engine import URL

from bench.responses import ResponseTracker
from tests.controller.process.test_workers import started_fleet
from tests.deploy.test_alerts import RULES
from tests.deploy.test_prometheus import DASHBOARD, VARIABLES, _query

RECEIVER_DOWN = "DevicectlTopologyReceiverDown"
#: the rule's `for:` in this test (the shipped one is 2m): long enough to see it pending first
FOR_SECONDS = 5


def dashboard_query(title: str, legend: str) -> str:
    board = json.loads(DASHBOARD.read_text())
    panel = next(p for p in board["panels"] if p["title"] == title)
    expr: str = next(t["expr"] for t in panel["targets"] if t["legendFormat"] == legend)
    for name, value in VARIABLES.items():  # every namespace and job, as Grafana's "All"
        expr = expr.replace(name, value)
    return expr


def short_rules(tmp: Path) -> Path:
    """The shipped rules file with the receiver-down rule's `for:` cut to FOR_SECONDS."""
    rules = yaml.safe_load(RULES.read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == RECEIVER_DOWN]
    assert rule["for"] == "2m"
    rule["for"] = f"{FOR_SECONDS}s"
    path = tmp / "alerts.yaml"
    path.write_text(yaml.safe_dump(rules))
    return path


async def value(http: aiohttp.ClientSession, url: str, expr: str) -> float | None:
    body = await _query(http, url, expr)
    assert body["status"] == "success", (expr, body)
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


async def until(http: aiohttp.ClientSession, url: str, expr: str, wanted: float, timeout: float = 90) -> None:
    """Wait until a query answers `wanted` (the timeout only bounds a failure)."""
    seen = None
    try:
        async with asyncio.timeout(timeout):
            while (seen := await value(http, url, expr)) != wanted:  # noqa: ASYNC110 (polls Prometheus)
                await asyncio.sleep(0.5)
    except TimeoutError:
        raise AssertionError(f"{expr}: {seen}, never {wanted}") from None


async def alert_state(http: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    async with http.get(f"{url}/api/v1/alerts") as reply:
        alerts = (await reply.json())["data"]["alerts"]
    return next((a for a in alerts if a["labels"]["alertname"] == RECEIVER_DOWN), None)


@pytest.fixture
async def tracker() -> AsyncIterator[ResponseTracker]:
    t = ResponseTracker()
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_backlog_counts_once_and_receiver_down_fires_with_two_workers(
    pg_database: URL, tmp_path: Path, tracker: ResponseTracker, prometheus: Any
) -> None:
    fleet = await started_fleet(pg_database, tmp_path, tracker, 0)
    try:
        targets = (fleet.metrics, fleet.metrics + 1, fleet.metrics + 2)  # front end, w1, w2
        url = await prometheus(*targets, rule_files=[short_rules(tmp_path)])
        backlog = dashboard_query("Outbox backlog", "undelivered")
        async with aiohttp.ClientSession() as http:
            # healthy: three processes up, the receiver up everywhere, nothing undelivered
            await fleet.send("ok", 3)
            await tracker.wait(120, "the first responses")
            await until(http, url, 'count(up{job="devicectl"} == 1)', 3)
            await until(http, url, "min(devicectl_delivery_receiver_up)", 1)
            assert await value(http, url, backlog) == 0
            assert await alert_state(http, url) is None

            # the sink dies; five responses are run and wait for it
            await tracker.stop()
            killed = time.time()
            await fleet.send("held", 5)
            await until(http, url, backlog, 5)
            await until(http, url, "min(devicectl_outbox_backlog)", 5)  # every exporter has seen them
            # exported once (by the front end): the sum over every process is 5 too, not 15
            assert await value(http, url, 'sum(devicectl_outbox_backlog{job="devicectl"})') == 5
            assert await value(http, url, "count(devicectl_outbox_backlog)") == 1
            assert await value(http, url, "count(devicectl_dead_letters)") == 1
            assert await value(http, url, "count(devicectl_database_up)") == 3  # per process still

            # the receiver-down alert: pending, then firing after its `for:`, from the sink's death
            states: list[str] = []
            async with asyncio.timeout(90):
                while (alert := await alert_state(http, url)) is None or alert["state"] != "firing":
                    if alert is not None and alert["state"] not in states:
                        states.append(alert["state"])
                    await asyncio.sleep(0.2)
            assert states == ["pending"], states
            assert alert["labels"] == {"alertname": RECEIVER_DOWN, "job": "devicectl", "severity": "critical"}
            active = alert["activeAt"]
            assert active is not None
    finally:
        await fleet.front.stop()
    assert datetime.fromisoformat(active.replace("Z", "+00:00")).timestamp() >= killed - 1
