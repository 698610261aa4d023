"""How the suite is spread over pytest-xdist workers (pyproject's addopts, tests/conftest.py)."""

from __future__ import annotations

import os
import shlex
import tomllib
from pathlib import Path

import pytest

from tests.conftest import pytest_xdist_auto_num_workers

ROOT = Path(__file__).parents[1]


def test_auto_is_two_workers_per_core_at_most_eight(pytestconfig: pytest.Config) -> None:
    cores = len(os.sched_getaffinity(0))
    assert pytest_xdist_auto_num_workers(pytestconfig) == min(8, 2 * cores)


def test_each_file_runs_on_one_worker(pytestconfig: pytest.Config) -> None:
    """`loadfile`: module- and session-scoped fixtures (the drills' fault matrix, the image build)
    are built once per file, not once per worker. `loadgroup` would not do: pytest 9 ignores the
    node id that xdist 3.8 rewrites for it, so its groups are never formed."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    addopts = shlex.split(pyproject["tool"]["pytest"]["ini_options"]["addopts"])
    assert addopts[addopts.index("--dist") + 1] == "loadfile"
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: xdist read the option and turned it off
        assert pytestconfig.getoption("dist") == "no"
