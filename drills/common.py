"""Pieces every drill shares: sizes, a database per backend, the session figures of the BMCs."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bench.processes import database, postgres_problem
from drills.stack import Stack


@contextlib.contextmanager
def backend_database(backend: str, workdir: Path) -> Iterator[str | None]:
    """A fresh database URL for `backend`, or None when PostgreSQL cannot be reached."""
    if backend == "postgres" and postgres_problem() is not None:
        yield None
        return
    with database(backend, workdir) as url:
        yield url


def skipped(backend: str) -> dict[str, Any]:
    return {"backend": backend, "skipped": f"PostgreSQL unreachable: {postgres_problem()}", "problems": []}


async def per_backend(
    drill: str,
    backends: tuple[str, ...],
    workdir: Path,
    run_backend: Callable[[str, str, Path], Awaitable[list[dict[str, Any]]]],
) -> list[dict[str, Any]]:
    """The rows of `run_backend(backend, url, dir)` for each backend, a skipped row where unreachable."""
    rows: list[dict[str, Any]] = []
    for backend in backends:
        with backend_database(backend, workdir) as url:
            if url is None:
                rows.append(skipped(backend))
            else:
                rows += await run_backend(backend, url, workdir / f"{drill}-{backend}")
    return rows


async def session_figures(stack: Stack) -> dict[str, int]:
    """Redfish sessions the BMCs saw: created, deleted, open now, refused at the limit."""
    totals = (await stack.control("GET", "/stats"))["totals"]
    return {
        "sessions_created": int(totals.get("sessions_created", 0)),
        "sessions_deleted": int(totals.get("sessions_deleted", 0)),
        "sessions_open": int(totals.get("open_sessions", 0)),
        "session_limit_rejections": int(totals.get("session_limit_rejections", 0)),
    }


def problems_of(result: dict[str, Any], *, allow_failed: bool = False) -> list[str]:
    """The verdict's problems, plus failed responses where every BMC was healthy."""
    problems = list(result.get("problems", []))
    if not allow_failed and result.get("failed"):
        problems.append(f"{result['failed']} failed responses: {result['examples']['failed']}")
    return problems
