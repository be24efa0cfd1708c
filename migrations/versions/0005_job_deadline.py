"""Give a job an optional deadline, after which its worker aborts it."""

from __future__ import annotations

import sqlalchemy as sa

from migrations.alter import columns_added

revision = "0005"
down_revision = "0004"

upgrade, downgrade = columns_added(
    "jobs",
    sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
)
