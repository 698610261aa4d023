"""What the write attempts of one cap change did on the BMC: written, not written, or unknown.

A failed request must say exactly what it changed. Whether a write landed follows from how its
call ended: an answer from the BMC accepting it (written), no request sent or an answer refusing
it (not written), or no answer at all once it was sent (unknown: a dropped connection or read
timeout after sending, NVIDIA `0x600` "may or may not have applied", a 202 whose task was still
running at the deadline or could not be followed). A later read that shows the value settles an
unknown write as written.
"""

from __future__ import annotations

from plugins.base import WriteOutcome
from plugins.redfish._errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    RedfishHTTPError,
    RequestTimeoutError,
    TaskFailedError,
    WriteMaybeAppliedError,
)


class WriteProgress:
    """The outcome so far of one component's change (starts: nothing written)."""

    __slots__ = ("outcome",)

    def __init__(self) -> None:
        self.outcome = WriteOutcome.NOT_WRITTEN

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
    if isinstance(exc, ConnectionFailedError | RequestTimeoutError | DeadlineExceededError):
        return exc.sent
    if isinstance(exc, RedfishHTTPError | TaskFailedError):
        return False  # the BMC answered, refusing the write (a failed task applied nothing)
    return True  # anything else after sending: the BMC's answer is not known
