"""The chart with several controller pods or `--workers`: allowed on PostgreSQL only, and what it
renders loads through the real settings loader and the process-model check devicectl runs at start."""

from __future__ import annotations

from typing import Any

import pytest

from controller.config import load_settings
from controller.process.workers import ProcessModelError, check_process_model, process_role
from tests.ops._helm import ChartFailure, render_chart
from tests.ops.test_deploy import CHART, by_kind, container, env_of


def deployed_settings(values: dict[str, Any]) -> Any:
    """The controller's settings as its pod would load them (env from the manifest; the config
    file's own settings are covered by test_deploy)."""
    c = container(by_kind(render_chart(CHART, values))["Deployment"][0])
    env = {k: v for k, v in env_of(c).items() if isinstance(v, str)}
    return load_settings(None, env=env)


def test_several_replicas_on_postgresql_render_and_each_pod_is_its_own_instance() -> None:
    kinds = by_kind(render_chart(CHART, {"replicas": 3}))
    deployment = kinds["Deployment"][0]
    assert deployment["spec"]["replicas"] == 3
    env = env_of(container(deployment))
    # each pod heartbeats and leases shards under its own name
    assert env["DEVICECTL_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "DEVICECTL_WORKERS" not in env
    settings = deployed_settings({"replicas": 3})
    assert settings.role == "all" and settings.workers == 0
    check_process_model(settings, "postgresql")  # what devicectl checks at start: accepted


def test_workers_per_pod_reach_the_settings() -> None:
    settings = deployed_settings({"workers": 2})
    assert settings.workers == 2 and process_role(settings) == "frontend"
    check_process_model(settings, "postgresql")
    with pytest.raises(ProcessModelError, match="SQLite serves one process"):
        check_process_model(settings, "sqlite")


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        ({"replicas": 2}, "replicas > 1 needs database.engine postgresql"),
        ({"workers": 1}, "workers > 0 needs database.engine postgresql"),
    ],
)
def test_sqlite_allows_one_replica_and_no_workers(values: dict[str, Any], refusal: str) -> None:
    sqlite = {"database": {"engine": "sqlite"}}
    assert by_kind(render_chart(CHART, sqlite))["Deployment"][0]["spec"]["replicas"] == 1
    with pytest.raises(ChartFailure, match=refusal):
        render_chart(CHART, {**sqlite, **values})
