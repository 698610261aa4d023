"""The fleet's counts behind `devicectl status`, on SQLite and PostgreSQL: each node counted once
whatever number of rows it has, only the nodes named, and a list of nodes longer than a
statement's bound parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from controller.store import FleetCounts, Store
from controller.store._models import BMC_CHECKS, BMC_HEALTH, DESIRED_LIMITS

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=1)


def _limit(device: str, component: str, checked: datetime | None, drift: datetime | None) -> dict:
    return dict(
        device=device,
        component=component,
        watts=700,
        request_id="r",
        set_at=T0,
        checked_at=checked,
        drift_at=drift,
        drift_detail="",
        enforced_watts=700,
    )


def _health(device: str, success: datetime | None, error: str, down: datetime | None) -> dict:
    return dict(
        device=device,
        last_success_at=success,
        last_error=error,
        inaccessible_since=down,
        updated_at=T0,
        sync_in_progress=False,
    )


def _check(check_id: str, device: str, status: str) -> dict:
    return dict(
        check_id=check_id,
        batch_id="b",
        device=device,
        write_cycle=False,
        status=status,
        verdict="",
        query={},
        result=None,
        created_at=T0,
        finished_at=None,
        owner="",
        error="",
        writes=None,
    )


async def test_each_count_takes_each_node_once_and_only_the_nodes_named(db_url: str, store: Store) -> None:
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            DESIRED_LIMITS.insert(),
            [
                _limit("a", "gpu/0", T0, LATER),  # drifted after its check, two components: one node
                _limit("a", "gpu/1", T0, LATER),
                _limit("b", "gpu/0", LATER, T0),  # checked again since: not drifted
                _limit("c", "gpu/0", None, LATER),  # never checked: not drifted
                _limit("d", "gpu/0", T0, T0),  # drift seen at the check itself
                _limit("x", "gpu/0", T0, LATER),  # not in the inventory
            ],
        )
        conn.execute(
            BMC_HEALTH.insert(),
            [
                _health("a", T0, "", None),  # reached
                _health("b", None, "refused", LATER),  # failed, down
                _health("c", None, "", None),  # a row, never reached nor failed
                _health("d", None, "timed out", None),  # failed once, not down
                _health("x", None, "refused", LATER),
            ],
        )
        conn.execute(
            BMC_CHECKS.insert(),
            [
                _check("1", "a", "done"),
                _check("2", "a", "failed"),
                _check("3", "b", "interrupted"),
                _check("4", "c", "queued"),
                _check("5", "d", "running"),
                _check("6", "x", "done"),
            ],
        )
    engine.dispose()
    inventory = ["a", "b", "c", "d", "e"]
    assert await store.fleet_counts(inventory) == FleetCounts(drifted=2, unreachable=1, verified=2, checked=3)
    assert await store.fleet_counts([]) == FleetCounts(0, 0, 0, 0)
    many = [f"absent{i:05d}" for i in range(70_000)] + inventory
    assert await store.fleet_counts(many) == FleetCounts(drifted=2, unreachable=1, verified=2, checked=3)
