"""Each device's reachability (`bmc_health`): last successful access, since when it has been
inaccessible, the last access error, whether a check is running, and its certificate's expiry.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "bmc_health",
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("last_success_at", TS, nullable=True),
        sa.Column("inaccessible_since", TS, nullable=True),
        sa.Column("last_error", sa.Text(), server_default="", nullable=False),
        sa.Column("last_error_at", TS, nullable=True),
        sa.Column("sync_in_progress", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("cert_not_after", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("device", name=op.f("pk_bmc_health")),
    )


def downgrade() -> None:
    op.drop_table("bmc_health")
