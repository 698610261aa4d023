"""Shard leases: devices map to shards, each shard is leased to one live executor at a time.

``shard_leases`` holds one row per shard ever leased (owner, fencing token, expiry);
``requests.shard`` and ``outbox.shard`` say which shard a request and its response belong to;
``controller_leases.role`` tells executors (which share the shards) from front ends.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "shard_leases",
        sa.Column("shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("owner", sa.String(), server_default="", nullable=False),
        sa.Column("token", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("shard", name=op.f("pk_shard_leases")),
    )
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("shard", sa.Integer(), server_default="0", nullable=False))
        batch.create_index("ix_requests_status_shard_seq", ["status", "shard", "seq"])
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("shard", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("controller_leases") as batch:
        batch.add_column(sa.Column("role", sa.String(), server_default="all", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("controller_leases") as batch:
        batch.drop_column("role")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("shard")
    with op.batch_alter_table("requests") as batch:
        batch.drop_index("ix_requests_status_shard_seq")
        batch.drop_column("shard")
    op.drop_table("shard_leases")
