"""Record prefix-cache hits and engine warmth on each job.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("cached_prompt_tokens", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("engine_warm", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("engine_warm")
        batch.drop_column("cached_prompt_tokens")
