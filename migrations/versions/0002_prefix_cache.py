"""Record prefix-cache hits and engine warmth on each job."""

from __future__ import annotations

import sqlalchemy as sa

from migrations.alter import columns_added

revision = "0002"
down_revision = "0001"

upgrade, downgrade = columns_added(
    "jobs",
    sa.Column("cached_prompt_tokens", sa.Integer(), nullable=True),
    sa.Column("engine_warm", sa.Boolean(), nullable=True),
)
