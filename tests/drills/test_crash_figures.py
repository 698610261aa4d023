"""The crash drill's duplicate and cap accounting, on arrivals written out by hand (no drill runs)."""

from __future__ import annotations

from drills.crash_figures import (
    BACKLOG_STARTED,
    BACKLOGS_DELIVERED,
    caps_against_responses,
    duplicates_per_kill,
    repeat_bounds,
    repeats,
)
from drills.load import Sent
from drills.stack import Arrival

ACKED = [Sent(f"r{i}", f"d{i}", 300.0, 0.0) for i in range(4)]


def arrival(request: str, seen_at: float) -> Arrival:
    return Arrival(request, "d" + request[1:], True, "", seen_at)


def test_repeats_name_the_previous_copy_and_skip_requests_never_acked() -> None:
    arrivals = [arrival("r0", 1.0), arrival("r0", 3.0), arrival("r0", 5.0)]
    arrivals += [arrival("x9", 1.0), arrival("x9", 2.0)]
    found = [(a.seen_at, previous) for a, previous in repeats(ACKED, arrivals)]
    assert found == [(3.0, 1.0), (5.0, 3.0)]


def test_a_repeat_held_back_by_a_short_life_counts_against_the_kill_that_caused_it() -> None:
    """Kill 0 leaves r0 unrecorded; the next life sends r1 first (the one-unrecorded window) and is
    killed (kill 1) before it sends r0; the life after sends both again. The last kill before both
    repeats is kill 1, yet each kill caused one."""
    kills = [10.0, 13.0]
    arrivals = [arrival("r0", 9.9), arrival("r1", 12.9), arrival("r0", 15.0), arrival("r1", 15.1)]
    assert duplicates_per_kill(ACKED, arrivals, kills) == ([1, 1], 0)


def test_two_repeats_one_kill_can_cause_are_one_too_many() -> None:
    kills = [10.0, 13.0]
    arrivals = [arrival("r0", 12.8), arrival("r1", 12.9), arrival("r0", 15.0), arrival("r1", 15.1)]
    # kill 0 came before both copies were sent: only kill 1 can have caused the repeats
    assert duplicates_per_kill(ACKED, arrivals, kills) == ([0, 1], 1)
    # while a backlog was delivered, that kill may cause one per device
    assert duplicates_per_kill(ACKED, arrivals, kills, bounds=[1, 5]) == ([0, 2], 0)


def test_a_copy_seen_just_after_the_kill_was_sent_before_it() -> None:
    """The drill reads the sink before each kill; a copy written between that read and the kill
    is seen at the next read, after the kill. Within `lag` of it, the kill still fits."""
    arrivals = [arrival("r0", 10.1), arrival("r0", 12.0)]
    assert duplicates_per_kill(ACKED, arrivals, [10.0], lag=0.25) == ([1], 0)
    assert duplicates_per_kill(ACKED, arrivals, [10.0], lag=0.05) == ([0], 1)


def test_a_repeat_within_one_life_or_before_any_kill_is_unexplained() -> None:
    arrivals = [arrival("r0", 1.0), arrival("r0", 2.0), arrival("r1", 11.0), arrival("r1", 12.0)]
    assert duplicates_per_kill(ACKED, arrivals, [10.0]) == ([0], 2)


def test_a_kill_during_a_backlog_may_cause_one_repeat_per_device() -> None:
    lives = [
        "... serving on ...\n",
        f"INFO {BACKLOG_STARTED}d1: 12 responses waiting) ...\n",
        f"INFO {BACKLOG_STARTED}d1: 12 responses waiting) ...\nINFO {BACKLOGS_DELIVERED}up to 2 ...)\n",
        "",
    ]
    assert repeat_bounds(lives, devices=4) == [1, 5, 1, 1]


def capped(request: str, device: str, watts: float) -> Arrival:
    """A response saying each of the device's two GPUs holds `watts`."""
    return Arrival(request, device, True, "", 1.0, tuple((g, True, watts, "") for g in range(2)))


def test_a_request_given_up_unacknowledged_that_ran_is_the_devices_last_word() -> None:
    """Under a busy host a sender gave up on a request whose ack was lost: it had been journaled,
    ran and was answered, and the BMC held its caps (seen: 285 W against the acked 248 W)."""
    acked = [Sent("a0", "d0", 248.0, 0.0)]
    unsettled = [Sent("a1", "d0", 285.0, 1.0)]
    arrivals = [capped("a0", "d0", 248.0), capped("a1", "d0", 285.0)]
    held = {"d0": [285.0, 285.0]}
    assert caps_against_responses(acked, arrivals, held)["caps_wrong"] == 2  # the acked alone: wrong
    figures = caps_against_responses(acked, arrivals, held, unsettled)
    assert figures["caps_wrong"] == 0 and figures["caps_checked"] == 2 and figures["unacked_that_ran"] == 1
    # answered, its word stands: the acked request's value would now be wrong
    assert caps_against_responses(acked, arrivals, {"d0": [248.0, 248.0]}, unsettled)["caps_wrong"] == 2


def test_an_unanswered_request_given_up_may_or_may_not_have_landed() -> None:
    acked = [Sent("a0", "d0", 248.0, 0.0)]
    unsettled = [Sent("a1", "d0", 285.0, 1.0)]
    arrivals = [capped("a0", "d0", 248.0)]
    for holds in (248.0, 285.0):
        figures = caps_against_responses(acked, arrivals, {"d0": [holds, holds]}, unsettled)
        assert figures["caps_wrong"] == 0 and figures["unacked_that_ran"] == 0, holds
    assert caps_against_responses(acked, arrivals, {"d0": [300.0, 248.0]}, unsettled)["caps_wrong"] == 1
