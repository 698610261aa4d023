"""What every drill test asserts."""

from __future__ import annotations

from typing import Any


def held(result: dict[str, Any]) -> None:
    """The drill's own verdict, with its figures in the failure message."""
    assert not result["problems"], result
    assert result["lost"] == 0 and result["stuck"] == 0 and result["order_violations"] == 0
    assert result["acked"] > 0 and result["responses"] == result["acked"]
