"""`datetime` <-> `google.protobuf.Timestamp`."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp


def datetime_to_timestamp(value: datetime) -> Timestamp:
    """A Timestamp for `value`; a naive datetime is taken as UTC (the controller's convention)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def timestamp_to_datetime(stamp: Timestamp) -> datetime:
    """A timezone-aware UTC datetime for `stamp` (sub-microsecond digits are dropped)."""
    return stamp.ToDatetime(tzinfo=UTC)
