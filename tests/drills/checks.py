"""What every drill test asserts, shared by the CI and the pending drill tests."""

from __future__ import annotations

from typing import Any

#: fault-matrix rows that fail today because of a known defect (test_drills_pending.py checks them)
PENDING_ROWS = {"session limit 0 (sessions expired)"}


def held(result: dict[str, Any]) -> None:
    """The drill's own verdict, with its figures in the failure message."""
    assert not result["problems"], result
    assert result["lost"] == 0 and result["stuck"] == 0 and result["order_violations"] == 0
    assert result["acked"] > 0 and result["responses"] == result["acked"]
