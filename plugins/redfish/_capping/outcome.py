"""What the write attempts of one cap change did on the BMC: written, not written, or unknown.

A failed request must say exactly what it changed. Whether a write landed follows from how its
call ended: an answer from the BMC accepting it (written), no request sent or an answer refusing
it (not written), or no answer at all once it was sent (unknown: a dropped connection or read
timeout after sending, a gateway's 502/503/504, NVIDIA `0x600` "may or may not have applied" or a
Base `OperationTimeout` 5xx to a write (`WriteMaybeAppliedError`), a 202 whose task was still
running at the deadline or could not be followed). A later read that shows the value settles an
unknown write as written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from plugins.base import DeviceControllerError, WriteOutcome, write_log
from plugins.redfish._wire.errors import (
    NVIDIA_TIMEOUT,
    ConnectionFailedError,
    DeadlineExceededError,
    GatewayError,
    RedfishError,
    RedfishHTTPError,
    RequestTimeoutError,
    TaskFailedError,
    TaskLostError,
    WriteMaybeAppliedError,
)
from plugins.redfish._wire.retry import gave_up

if TYPE_CHECKING:
    from plugins.redfish._platforms import LimitReading

#: how a write call ends when the BMC may have applied it without saying so: read before deciding
ANSWER_LOST = (
    WriteMaybeAppliedError,
    ConnectionFailedError,
    RequestTimeoutError,
    GatewayError,
    TaskLostError,
)


class WriteProgress:
    """The outcome so far of one component's change (starts: nothing written).

    Attributes:
        reading: the last read-back after a write whose answer was lost (what is in force).
        note: how an unknown write was settled as landed (for the component's result).
    """

    __slots__ = ("note", "outcome", "reading")

    def __init__(self) -> None:
        self.outcome = WriteOutcome.NOT_WRITTEN
        self.reading: LimitReading | None = None
        self.note = ""

    def accepted(self) -> None:
        """The BMC accepted a write, or a read shows the value in force after one was sent."""
        self.outcome = WriteOutcome.WRITTEN

    def failed(self, exc: BaseException) -> None:
        """A write call ended with `exc`: an earlier unknown write stays unknown."""
        if self.outcome is WriteOutcome.NOT_WRITTEN and may_have_landed(exc):
            self.outcome = WriteOutcome.UNKNOWN


def may_have_landed(exc: BaseException) -> bool:
    """Whether a write call that raised `exc` may have changed the BMC."""
    if isinstance(exc, WriteMaybeAppliedError):
        return True
    if isinstance(exc, ConnectionFailedError | RequestTimeoutError | DeadlineExceededError | GatewayError):
        return exc.sent  # a gateway's 502/503/504 is not the BMC's answer
    if isinstance(exc, RedfishHTTPError | TaskFailedError):
        return False  # the BMC answered, refusing the write (a failed task applied nothing)
    return True  # anything else after sending: the BMC's answer is not known


def lost_answer(exc: BaseException) -> str:
    """What became of the answer of a write that may have landed (for messages and receipts)."""
    if isinstance(exc, GatewayError):
        return f"the answer was HTTP {exc.status}, a gateway's error, not the BMC's"
    if isinstance(exc, WriteMaybeAppliedError):
        if exc.nvidia_code == NVIDIA_TIMEOUT:
            return "the BMC answered NVIDIA 0x600 (may or may not have applied)"
        return "the BMC answered OperationTimeout (a timeout inside it; may or may not have applied)"
    if isinstance(exc, TaskLostError):
        return "its task could not be followed"
    return "its answer was lost after it was sent"


def landed(exc: BaseException, after: float | None) -> str:
    """A read shows that the write `exc` ended did land: its receipt says so; returns the note."""
    note = f"written: {lost_answer(exc)}; the read-back shows the value in force"
    _settle(exc, f"ok (read back; {_status(exc)})", after, note)
    return note


def not_landed(exc: BaseException, after: float | None, shown: str, *, again: bool) -> None:
    """A read after the write `exc` ended shows `shown`, not the value written: its receipt says
    so, and whether it is sent once more (else it stays unknown: it may still land)."""
    if again:
        _settle(exc, None, after, f"{lost_answer(exc)}; read back: {shown}; sent once more")
    else:
        _settle(exc, f"unknown ({_status(exc)})", after, f"{lost_answer(exc)}; read back: {shown}")


def unread(exc: BaseException, read_failed: BaseException) -> None:
    """The read after the write `exc` ended failed: its receipt says the write is unknown."""
    _settle(
        exc, f"unknown ({_status(exc)})", None, f"{lost_answer(exc)}; the read-back failed ({read_failed})"
    )


def _settle(exc: BaseException, status: str | None, after: float | None, note: str) -> None:
    """Add what a read after it showed to the receipt of the write `exc` ended."""
    index = exc.receipt if isinstance(exc, RedfishError) else None
    if index is None:
        return
    log = write_log()
    entries = log.entries()
    earlier = entries[index].note if index < len(entries) else ""
    log.read_back(index, after, f"{earlier}; {note}" if earlier else note)
    if status is not None:
        log.set_status(index, status)


def time_for_another(exc: BaseException, deadline: float) -> bool:
    """Whether a second write may go after `exc`: not when the BMC asked for a wait past the
    deadline (the error then says so)."""
    wait = getattr(exc, "retry_after", None)
    if wait is None or time.monotonic() + wait < deadline:
        return True
    gave_up(exc, 1, deadline)
    return False


def annotate(exc: DeviceControllerError, note: str) -> None:
    """Add `note` to the error's message (what the read after it showed)."""
    exc.message += note
    exc.args = (exc.message,)


def _status(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return f"the answer was HTTP {status}" if status else "no answer came"
