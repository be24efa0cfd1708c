"""Give a job an optional deadline, after which its worker aborts it."""

from __future__ import annotations

from migrations.alter import columns_added, timestamp

revision = "0005"
down_revision = "0004"

upgrade, downgrade = columns_added(
    "jobs",
    timestamp("deadline_at"),
)
