"""Keep the log probabilities of a job that asked for them (a batch's output is built
from rows)."""

from __future__ import annotations

import sqlalchemy as sa

from migrations.alter import columns_added

revision = "0011"
down_revision = "0010"

upgrade, downgrade = columns_added(
    "jobs",
    sa.Column("output_logprobs", sa.JSON(), nullable=True),
)
