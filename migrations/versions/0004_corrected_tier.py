"""Let operators correct a job's tier, for retraining the router."""

from __future__ import annotations

import sqlalchemy as sa

from migrations.alter import columns_added

revision = "0004"
down_revision = "0003"

upgrade, downgrade = columns_added(
    "jobs",
    sa.Column("corrected_tier", sa.String(16), nullable=True),
)
