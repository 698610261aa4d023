"""A BMC's Redfish session table as `BmcClient` sees it: whose a session is (`session_marker`, the
`Session.Context` our logins send, and `marker_parts`, which reads one back), what one look at the
table found (`Sweep`), and how a full table is explained in the error of a refused login
(`full_table`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

MARKER_PREFIX = "devicectl/"


def session_marker(client_id: str, boot: str) -> str:
    """The `Session.Context` of this process's sessions."""
    return f"{MARKER_PREFIX}{client_id}/{boot}"


def marker_parts(context: object) -> tuple[str, str] | None:
    """(client id, boot) of a devicectl marker, None for any other Context."""
    if not isinstance(context, str) or not context.startswith(MARKER_PREFIX):
        return None
    client_id, sep, boot = context[len(MARKER_PREFIX) :].rpartition("/")
    return (client_id, boot) if sep and client_id and boot else None


@dataclass
class Sweep:
    """What one look at a BMC's session table found."""

    #: sessions listed in the collection
    listed: int = 0
    #: earlier processes' sessions deleted (or already gone)
    deleted: int = 0
    #: sessions left alone, by (account, client address, whose Context)
    others: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: of those, sessions of our account without a Context (ours only if the account is exclusive)
    unmarked: int = 0

    def holders(self) -> str:
        """Who holds the sessions left alone, in a few words."""
        parts = []
        for (user, address, context), n in self.others.most_common(4):
            who = f"{n} of account {user!r}" + (f" from {address}" if address else "")
            parts.append(who + (f" (Context {context!r})" if context else ""))
        return "; ".join(parts) or ("no one" if not self.listed else "sessions that could not be read")


def full_table(sweep: Sweep | None, marker: str, username: str | None) -> str:
    """What the BMC's full session table holds, for the error (its count is its limit)."""
    if sweep is None:
        return "the BMC's Redfish session table is full (SessionLimitExceeded; its sessions unreadable)"
    mine = f"this controller's (Context {marker.rpartition('/')[0]}/…)"
    ours = f"none of them {mine}"
    if sweep.deleted:
        ours = f"{sweep.deleted} of them earlier processes of {mine} were deleted and the table "
        ours += "filled up again before the next login"
    table = (
        f"the BMC's Redfish session table is full: {sweep.listed} of {sweep.listed} sessions open "
        f"(its limit: it refused one more with SessionLimitExceeded), {ours}; held by {sweep.holders()}"
    )
    if sweep.unmarked:
        table += (
            f"; {sweep.unmarked} of account {username!r} carry no Context and are not "
            "in this controller's record of the sessions it opened: they may be another live "
            "controller's behind the same address, so they are left to expire on the BMC's "
            "inactivity timeout"
        )
    return table
