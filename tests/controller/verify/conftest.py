import pytest

from controller.execution import write_cycle
from tests.plugins.nvml.conftest import h100x4, make_node  # noqa: F401 (fixtures)


@pytest.fixture
def lost_writes_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test write whose answer was lost is taken as settled at once (`LOST_WRITE_SECONDS` 0): a
    journal a crashed cycle left is restored and closed by one restore. For tests of who restores a
    journal and what it keeps, not of that wait (test_write_cycle_journal.py tests the wait)."""
    monkeypatch.setattr(write_cycle, "LOST_WRITE_SECONDS", 0.0)
