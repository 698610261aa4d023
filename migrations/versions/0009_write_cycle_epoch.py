"""A write cycle's journal is taken over by a compare-and-set of its epoch: ``write_cycles.epoch``
counts the takeovers (0: the cycle's own process), so a holder that lost its journal to a newer one
writes and closes nothing.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("write_cycles") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("write_cycles") as batch:
        batch.drop_column("epoch")
