"""Keep every choice of a job that asked for several (``n``)."""

from __future__ import annotations

import sqlalchemy as sa

from migrations.alter import columns_added

revision = "0010"
down_revision = "0009"

upgrade, downgrade = columns_added(
    "jobs",
    sa.Column("output_choices", sa.JSON(), nullable=True),
)
