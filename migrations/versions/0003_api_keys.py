"""API keys for the gateway, and the key that owns each job."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import add_columns, create_keyed_table, drop_columns, timestamp

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    create_keyed_table(
        "api_keys",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("rate_limit_per_min", sa.Integer(), nullable=False),
        timestamp("created_at", nullable=False),
        timestamp("revoked_at"),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
        id_length=32,
    )
    add_columns(
        "jobs", sa.Column("owner", sa.String(32), nullable=True), index=("ix_jobs_owner", ["owner"])
    )


def downgrade() -> None:
    drop_columns("jobs", "owner", index="ix_jobs_owner")
    op.drop_table("api_keys")
