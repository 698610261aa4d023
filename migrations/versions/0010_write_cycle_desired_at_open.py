"""A write cycle's journal records which request set each component's desired limit when the cycle
opened (``write_cycles.desired_at_open``: component -> request id, read in the insert's own
transaction). A restore then keeps a component whose desired limit a later request set, judged
by the database's own rows rather than by comparing one host's clock (the request's completion)
with another's (the cycle's opening).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# JSONB on PostgreSQL, JSON text on SQLite.
DOC = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("write_cycles") as batch:
        batch.add_column(sa.Column("desired_at_open", DOC, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("write_cycles") as batch:
        batch.drop_column("desired_at_open")
