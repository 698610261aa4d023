"""The fleet's summary for `devicectl status`: how many of the inventory's nodes drifted, are
unreachable, were never verified or never checked, counted by the database (one parameter for
the whole inventory, `one_of`), not by reading every row into the process: at 20,000 nodes the
rows (8 desired limits, a health row and a verification each) cost 2.5 CPU-s per status call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ._bmc_checks import FINISHED
from ._database import one_of
from ._models import BMC_CHECKS as B
from ._models import BMC_HEALTH as H
from ._models import DESIRED_LIMITS as D


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """Of the nodes named: those with a limit that drifted since its last check, those whose last
    access failed, those with a finished verification, and those whose BMC was ever reached or
    ever failed (a health row with a success or an error)."""

    drifted: int
    unreachable: int
    verified: int
    checked: int


def fleet_counts(conn: Connection, devices: Sequence[str]) -> FleetCounts:
    if not devices:
        return FleetCounts(0, 0, 0, 0)
    named = list(dict.fromkeys(devices))

    def count(query: sa.Select[Any]) -> int:
        return int(conn.execute(query).scalar_one())

    drift = sa.and_(D.c.drift_at.is_not(None), D.c.checked_at.is_not(None), D.c.drift_at >= D.c.checked_at)
    drifted = sa.select(sa.func.count(sa.distinct(D.c.device))).where(one_of(conn, D.c.device, named), drift)
    unreachable = sa.select(sa.func.count()).where(
        one_of(conn, H.c.device, named), H.c.inaccessible_since.is_not(None)
    )
    verified = sa.select(sa.func.count(sa.distinct(B.c.device))).where(
        one_of(conn, B.c.device, named), B.c.status.in_(FINISHED)
    )
    reached_or_failed = sa.or_(H.c.last_success_at.is_not(None), H.c.last_error != "")
    checked = sa.select(sa.func.count()).where(one_of(conn, H.c.device, named), reached_or_failed)
    return FleetCounts(count(drifted), count(unreachable), count(verified), count(checked))
