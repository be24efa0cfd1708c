"""Conversations, their turns, and one summary per conversation and day."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import timestamp

revision = "0007"
down_revision = "0006"


def _create_conversation_part(name: str, unique_by: str, *columns: sa.Column[object]) -> None:
    """A table of rows that belong to a conversation: an id, the conversation's key
    (gone with the conversation), then ``columns``; one row per conversation and
    ``unique_by``."""
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(200), nullable=False),
        *columns,
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
        sa.UniqueConstraint(
            "owner", "conversation_id", unique_by, name=f"uq_{name}_conversation_{unique_by}"
        ),
        sa.ForeignKeyConstraint(
            ["owner", "conversation_id"],
            ["conversations.owner", "conversations.id"],
            name=f"fk_{name}_conversation",
            ondelete="CASCADE",
        ),
    )


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        timestamp("created_at", nullable=False),
        timestamp("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("owner", "id", name=op.f("pk_conversations")),
    )
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])
    _create_conversation_part(
        "turns",
        "seq",
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        timestamp("created_at", nullable=False),
    )
    op.create_index("ix_turns_job_id", "turns", ["job_id"])
    op.create_index("ix_turns_created_at", "turns", ["created_at"])
    _create_conversation_part(
        "summaries",
        "day",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("stage", sa.String(16), nullable=True),
        sa.Column("step_jobs", sa.JSON(), nullable=False),
        timestamp("created_at", nullable=False),
        timestamp("finished_at"),
    )
    op.create_index("ix_summaries_day_status", "summaries", ["day", "status"])


def downgrade() -> None:
    op.drop_table("summaries")
    op.drop_table("turns")
    op.drop_table("conversations")
