"""The outbox's durable back-off schedule: 0.2 s doubling per attempt plus up to 0.5 s of jitter,
never above the cap, never negative, and no overflow however many attempts a row has."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.delivery.wire import BACKOFF_FIRST, BACKOFF_JITTER, backoff_delay


@given(st.integers(min_value=1, max_value=10**6), st.floats(min_value=0.0, max_value=3600.0))
def test_the_delay_doubles_within_its_jitter_and_stays_under_the_cap(attempt: int, cap: float) -> None:
    delay = backoff_delay(attempt, cap)
    assert 0.0 <= delay <= cap
    if attempt <= 20:
        base = BACKOFF_FIRST * 2 ** (attempt - 1)
        assert min(base, cap) <= delay + 1e-9 or delay == cap
        assert delay <= min(base + BACKOFF_JITTER, cap) + 1e-9


def test_the_first_delays() -> None:
    assert 0.2 <= backoff_delay(1, 60) <= 0.7
    assert 0.4 <= backoff_delay(2, 60) <= 0.9
    assert backoff_delay(10_000, 30) == 30
