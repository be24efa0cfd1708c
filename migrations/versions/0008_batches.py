"""The Batch API: uploaded files and their lines, batches, line errors; jobs name their batch."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import add_columns, create_keyed_table, drop_columns, timestamp

revision = "0008"
down_revision = "0007"


def _create_line_table(name: str, parent_key: str, *columns: sa.Column[object]) -> None:
    """A table of one row per line of a file or a batch: ``parent_key`` (the file's or
    the batch's id) and the line's number key it, then ``columns``."""
    op.create_table(
        name,
        sa.Column(parent_key, sa.String(40), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        *columns,
        sa.PrimaryKeyConstraint(parent_key, "line_no", name=op.f(f"pk_{name}")),
    )


def upgrade() -> None:
    create_keyed_table(
        "batch_files",
        sa.Column("owner", sa.String(32), nullable=True),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.String(40), nullable=True),
        timestamp("created_at", nullable=False),
        id_length=40,
    )
    op.create_index("ix_batch_files_owner", "batch_files", ["owner"])
    _create_line_table(
        "batch_file_lines",
        "file_id",
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("custom_id", sa.String(200), nullable=True),
        sa.Column("problem", sa.Text(), nullable=True),
    )
    create_keyed_table(
        "batches",
        sa.Column("owner", sa.String(32), nullable=True),
        sa.Column("input_file_id", sa.String(40), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("enqueued", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        timestamp("lease_until"),
        sa.Column("output_file_id", sa.String(40), nullable=True),
        sa.Column("error_file_id", sa.String(40), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
        timestamp("created_at", nullable=False),
        timestamp("expires_at", nullable=False),
        timestamp("in_progress_at"),
        timestamp("finalizing_at"),
        timestamp("completed_at"),
        timestamp("failed_at"),
        timestamp("expired_at"),
        timestamp("cancelling_at"),
        timestamp("cancelled_at"),
        id_length=40,
    )
    op.create_index("ix_batches_owner", "batches", ["owner"])
    op.create_index("ix_batches_status", "batches", ["status"])
    _create_line_table(
        "batch_line_errors",
        "batch_id",
        sa.Column("custom_id", sa.String(200), nullable=True),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
    )
    add_columns(
        "jobs",
        sa.Column("batch_id", sa.String(40), nullable=True),
        sa.Column("custom_id", sa.String(200), nullable=True),
        index=("ix_jobs_batch_id", ["batch_id"]),
    )


def downgrade() -> None:
    drop_columns("jobs", "batch_id", "custom_id", index="ix_jobs_batch_id")
    op.drop_table("batch_line_errors")
    op.drop_index("ix_batches_status", table_name="batches")
    op.drop_index("ix_batches_owner", table_name="batches")
    op.drop_table("batches")
    op.drop_table("batch_file_lines")
    op.drop_index("ix_batch_files_owner", table_name="batch_files")
    op.drop_table("batch_files")
