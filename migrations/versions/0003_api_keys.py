"""API keys for the gateway, and the key that owns each job."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import add_columns, drop_columns

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("rate_limit_per_min", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    add_columns(
        "jobs", sa.Column("owner", sa.String(32), nullable=True), index=("ix_jobs_owner", ["owner"])
    )


def downgrade() -> None:
    drop_columns("jobs", "owner", index="ix_jobs_owner")
    op.drop_table("api_keys")
