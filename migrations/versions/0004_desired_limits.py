"""Desired state: the limit each component should hold, the request that set it, and drift found.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "desired_limits",
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("component", sa.String(), nullable=False),
        sa.Column("watts", sa.Float(), nullable=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enforced_watts", sa.Float(), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("drift_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("drift_detail", sa.Text(), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("device", "component", name=op.f("pk_desired_limits")),
    )


def downgrade() -> None:
    op.drop_table("desired_limits")
