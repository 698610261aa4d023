"""The write cycle's journal: ``write_cycles`` holds, per cycle, the value and mode of every cap it
will touch, made durable before its first write; a cycle left `open` by a crash is restored from it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on PostgreSQL, JSON text on SQLite.
DOC = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "write_cycles",
        sa.Column("cycle_id", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("priors", DOC, nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("report", DOC, nullable=True),
        sa.Column("owner", sa.String(), server_default="", nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("closed_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("cycle_id", name=op.f("pk_write_cycles")),
    )
    op.create_index("ix_write_cycles_device_status", "write_cycles", ["device", "status"])
    op.create_index("ix_write_cycles_status", "write_cycles", ["status"])


def downgrade() -> None:
    op.drop_index("ix_write_cycles_status", table_name="write_cycles")
    op.drop_index("ix_write_cycles_device_status", table_name="write_cycles")
    op.drop_table("write_cycles")
