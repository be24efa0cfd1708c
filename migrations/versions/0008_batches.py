"""The Batch API: uploaded files and their lines, batches, line errors; jobs name their batch."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import add_columns, drop_columns

revision = "0008"
down_revision = "0007"


def _when(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "batch_files",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(32), nullable=True),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.Integer(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("batch_id", sa.String(40), nullable=True),
        _when("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batch_files")),
    )
    op.create_index("ix_batch_files_owner", "batch_files", ["owner"])
    op.create_table(
        "batch_file_lines",
        sa.Column("file_id", sa.String(40), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("custom_id", sa.String(200), nullable=True),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("file_id", "line_no", name=op.f("pk_batch_file_lines")),
    )
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), nullable=False),
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
        _when("lease_until"),
        sa.Column("output_file_id", sa.String(40), nullable=True),
        sa.Column("error_file_id", sa.String(40), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=True),
        _when("created_at", nullable=False),
        _when("expires_at", nullable=False),
        _when("in_progress_at"),
        _when("finalizing_at"),
        _when("completed_at"),
        _when("failed_at"),
        _when("expired_at"),
        _when("cancelling_at"),
        _when("cancelled_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
    )
    op.create_index("ix_batches_owner", "batches", ["owner"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_table(
        "batch_line_errors",
        sa.Column("batch_id", sa.String(40), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("custom_id", sa.String(200), nullable=True),
        sa.Column("code", sa.String(64), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("batch_id", "line_no", name=op.f("pk_batch_line_errors")),
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
