"""Verifications of a device's readiness for power management (`devicectl verify`): ``bmc_checks``
holds one row per device and run, journaled before the check starts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on PostgreSQL, JSON text on SQLite.
DOC = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "bmc_checks",
        sa.Column("check_id", sa.String(), nullable=False),
        sa.Column("batch_id", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("write_cycle", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("verdict", sa.String(), server_default="", nullable=False),
        sa.Column("query", DOC, nullable=False),
        sa.Column("result", DOC, nullable=True),
        sa.Column("writes", DOC, nullable=True),
        sa.Column("error", sa.Text(), server_default="", nullable=False),
        sa.Column("owner", sa.String(), server_default="", nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("check_id", name=op.f("pk_bmc_checks")),
    )
    op.create_index("ix_bmc_checks_status_created_at", "bmc_checks", ["status", "created_at"])
    op.create_index("ix_bmc_checks_device_created_at", "bmc_checks", ["device", "created_at"])
    op.create_index("ix_bmc_checks_batch_id", "bmc_checks", ["batch_id"])


def downgrade() -> None:
    op.drop_index("ix_bmc_checks_batch_id", table_name="bmc_checks")
    op.drop_index("ix_bmc_checks_device_created_at", table_name="bmc_checks")
    op.drop_index("ix_bmc_checks_status_created_at", table_name="bmc_checks")
    op.drop_table("bmc_checks")
