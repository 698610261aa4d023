"""Receipts: each journaled request keeps the device writes it made (pruned with the row).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_doc = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("writes_json", json_doc, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("writes_json")
