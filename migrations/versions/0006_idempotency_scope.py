"""Scope idempotency keys to the job's owner and remember what each key was used for."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import add_columns

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    add_columns(
        "jobs",
        sa.Column("idempotency_scope", sa.String(32), nullable=False, server_default=""),
        sa.Column("request_hash", sa.String(64), nullable=True),
    )
    op.execute("UPDATE jobs SET idempotency_scope = owner WHERE owner IS NOT NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_idempotency_key", type_="unique")
        batch.create_unique_constraint(
            "uq_jobs_idempotency_scope_key", ["idempotency_scope", "idempotency_key"]
        )


def downgrade() -> None:
    # Keys were unique per owner; the global constraint only fits if no key repeats
    # across owners, so the later duplicates lose their key rather than the job.
    op.execute(
        "UPDATE jobs SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL AND id NOT IN"
        " (SELECT keep FROM (SELECT MIN(id) AS keep FROM jobs"
        " WHERE idempotency_key IS NOT NULL GROUP BY idempotency_key) AS kept)"
    )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_idempotency_scope_key", type_="unique")
        batch.create_unique_constraint("uq_jobs_idempotency_key", ["idempotency_key"])
        batch.drop_column("request_hash")
        batch.drop_column("idempotency_scope")
