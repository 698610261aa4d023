"""Helpers for the benchmark tests: they run each benchmark at tiny size and check that it measured
real work (every response once, the simulator's counters), not the performance targets."""

from __future__ import annotations

import os

import pytest

from bench.processes import postgres_problem


def require_postgres() -> None:
    """Skip without PostgreSQL locally; fail in CI, like the rest of the suite."""
    problem = postgres_problem()
    if problem:
        message = f"PostgreSQL unreachable ({problem}); set DEVICECTL_TEST_PG_URL"
        if os.environ.get("CI"):
            pytest.fail(f"{message}. CI must run the PostgreSQL tests.", pytrace=False)
        pytest.skip(message)
