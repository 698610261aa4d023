"""Timestamps, JSON encoding and the requested/applied note."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from controller.translate import datetime_to_timestamp, encode_json_object, timestamp_to_datetime
from controller.translate._diag import describe, parse


def test_timestamp_round_trip_keeps_microseconds() -> None:
    when = datetime(2026, 11, 21, 12, 48, 26, 999_999, tzinfo=UTC)
    stamp = datetime_to_timestamp(when)
    assert (stamp.seconds, stamp.nanos) == (int(when.timestamp()), 999_999_000)
    assert timestamp_to_datetime(stamp) == when
    assert timestamp_to_datetime(stamp).tzinfo is UTC


def test_timestamp_naive_is_utc_and_zones_convert() -> None:
    assert datetime_to_timestamp(datetime(1970, 1, 1, 0, 0, 1)).seconds == 1
    assert (
        datetime_to_timestamp(datetime(1970, 1, 1, 2, 0, 1, tzinfo=timezone(timedelta(hours=2)))).seconds == 1
    )


@pytest.mark.parametrize(
    "when",
    [
        datetime(1969, 12, 31, 23, 59, 59, 250_000, tzinfo=UTC),
        datetime(1900, 3, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2262, 4, 11, 23, 47, 16, 854_775, tzinfo=timezone(timedelta(hours=-7))),
        datetime(2026, 11, 23, 13, 45, 0, 123_456),
    ],
)
def test_timestamp_matches_the_protobuf_conversion(when: datetime) -> None:
    expected = Timestamp()
    expected.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))
    assert datetime_to_timestamp(when) == expected


def test_encode_json_object() -> None:
    assert encode_json_object({}) == b"{}"
    assert encode_json_object({"é": (1, 2.5, None)}) == '{"é":[1,2.5,null]}'.encode()
    with pytest.raises(ValueError, match=r"state\.a\[0\]: must be a finite number"):
        encode_json_object({"a": [float("inf")]}, "state")
    with pytest.raises(ValueError, match="keys must be strings"):
        encode_json_object({1: 2}, "state")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("message", "requested", "applied"),
    [
        ("", 700.0, 650.0),
        ("capped", 700.0, 650.0),
        ("multi\nline (note)", 0.1, 1e-7),
        ("", 1e16, 3.0),
        ("", -1.0, 0.0),
        ("", float("inf"), 5.0),
    ],
)
def test_note_round_trips(message: str, requested: float, applied: float) -> None:
    assert parse(describe(message, requested, applied), applied) == (message, requested)


def test_note_only_trusted_when_applied_matches() -> None:
    assert parse("requested 700 W, applied 650 W", 600.0) == ("requested 700 W, applied 650 W", None)
    assert parse("plain", 1.0) == ("plain", None)
    assert describe("x", None, 5.0) == describe("x", 5.0, 5.0) == "x"


def test_a_cap_not_applied_never_reads_applied_0_w() -> None:
    assert describe("GPU 1: too high", 1300.0, 0.0) == "GPU 1: too high (requested 1300 W, not applied)"
    assert parse("GPU 1: too high (requested 1300 W, not applied)", 0.0) == ("GPU 1: too high", 1300.0)
    assert parse("requested 1300 W, not applied", 450.0) == ("requested 1300 W, not applied", None)
