"""The chart with several controller pods or `--workers`: allowed on PostgreSQL only, and what it
renders loads through the real settings loader and the process-model check devicectl runs at start."""

from __future__ import annotations

from typing import Any

import pytest

from controller.config import load_settings
from controller.process.workers import ProcessModelError, check_process_model, process_role
from tests.deploy._helm import ChartFailure, render_chart, render_notes
from tests.deploy.test_deploy import CHART, by_kind, container, env_of


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


def test_the_memory_of_the_controller_container_scales_with_its_processes() -> None:
    def resources(values: dict[str, Any]) -> Any:
        return container(by_kind(render_chart(CHART, values))["Deployment"][0])["resources"]

    assert resources({})["limits"]["memory"] == "1Gi" and resources({})["requests"]["memory"] == "256Mi"
    three = resources({"workers": 3})  # a front end and 3 executors: four processes
    assert three["limits"]["memory"] == "4Gi" and three["requests"]["memory"] == "1024Mi"
    assert three["requests"]["cpu"] == "500m"
    with pytest.raises(ChartFailure, match="give it in Mi or Gi"):
        resources({"workers": 1, "resources": {"limits": {"memory": "1.5G"}}})


def test_sqlite_on_an_emptydir_warns_in_the_notes() -> None:
    sqlite = {"database": {"engine": "sqlite"}}
    notes = render_notes(CHART, sqlite)
    assert "WARNING: SQLite on an emptyDir" in notes and "persistence.existingClaim" in notes
    claimed = render_notes(CHART, {**sqlite, "persistence": {"existingClaim": "devicectl-data"}})
    assert "WARNING" not in claimed
    assert "WARNING" not in render_notes(CHART, {})  # PostgreSQL keeps nothing on the volume
