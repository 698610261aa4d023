"""One BMC fault-matrix run per session, shared by the fault-matrix drill tests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from drills import matrix


@pytest.fixture(scope="session")
def matrix_result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return asyncio.run(matrix.run(matrix.REDUCED, tmp_path_factory.mktemp("matrix")))
