"""Initial schema: devices, request journal, outbox, state audit, verifications, controller leases.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Written by hand (checked against the models by tests/controller/store/test_schema.py). Column types are
spelled out here rather than imported from the models so this revision never changes after the fact.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# timestamptz on PostgreSQL; SQLite stores naive UTC (the models' UTCDateTime converts).
TS = sa.DateTime(timezone=True)
# JSONB on PostgreSQL, JSON text on SQLite.
DOC = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
# On SQLite only a column typed exactly INTEGER aliases the rowid.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UNDELIVERED = sa.text("delivered_at IS NULL")


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("plugin", sa.String(), server_default="", nullable=False),
        sa.Column("model_json", DOC, nullable=True),
        sa.Column("state_json", DOC, nullable=True),
        sa.Column("state_version", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("last_request_id", sa.String(), server_default="", nullable=False),
        sa.Column("last_kind", sa.String(), server_default="", nullable=False),
        sa.Column("last_outcome", sa.String(), server_default="", nullable=False),
        sa.Column("last_error", sa.Text(), server_default="", nullable=False),
        sa.Column("in_inventory", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
    )

    op.create_table(
        "requests",
        sa.Column("seq", ID, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("trace_id", sa.String(), server_default="", nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), server_default="", nullable=False),
        sa.Column("error", sa.Text(), server_default="", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("accepted_at", TS, nullable=False),
        sa.Column("deadline_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("owner", sa.String(), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_requests")),
        sa.UniqueConstraint("request_id", name=op.f("uq_requests_request_id")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_requests_device_seq", "requests", ["device", "seq"])
    op.create_index("ix_requests_status_seq", "requests", ["status", "seq"])

    op.create_table(
        "outbox",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("delivered_at", TS, nullable=True),
        sa.Column("last_error", sa.Text(), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("request_id", name=op.f("uq_outbox_request_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_outbox_undelivered_device_id",
        "outbox",
        ["device", "id"],
        sqlite_where=UNDELIVERED,
        postgresql_where=UNDELIVERED,
    )

    op.create_table(
        "state_audit",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("trace_id", sa.String(), server_default="", nullable=False),
        sa.Column("kind", sa.String(), server_default="", nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("state_version", sa.BigInteger(), nullable=False),
        sa.Column("summary", DOC, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_state_audit")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_state_audit_device_id", "state_audit", ["device", "id"])

    op.create_table(
        "verifications",
        sa.Column("verification_id", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("payload", DOC, nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("detail", sa.Text(), server_default="", nullable=False),
        sa.Column("checks", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_checks", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("due_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("verification_id", name=op.f("pk_verifications")),
    )
    op.create_index("ix_verifications_status_due_at", "verifications", ["status", "due_at"])
    op.create_index("ix_verifications_device_created_at", "verifications", ["device", "created_at"])

    op.create_table(
        "controller_leases",
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_controller_leases")),
    )


def downgrade() -> None:
    op.drop_table("controller_leases")
    op.drop_table("verifications")
    op.drop_table("state_audit")
    op.drop_table("outbox")
    op.drop_table("requests")
    op.drop_table("devices")
