"""`datetime` <-> `google.protobuf.Timestamp`."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_to_timestamp(value: datetime) -> Timestamp:
    """A Timestamp for `value`; a naive datetime is taken as UTC (the controller's convention)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    # NOTE: what Timestamp.FromDatetime computes, at a fraction of its cost (one per response);
    # timedelta keeps seconds and microseconds non-negative, as Timestamp wants its nanos
    since = value - _EPOCH
    return Timestamp(seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000)


def timestamp_to_datetime(stamp: Timestamp) -> datetime:
    """A timezone-aware UTC datetime for `stamp` (sub-microsecond digits are dropped)."""
    return stamp.ToDatetime(tzinfo=UTC)
