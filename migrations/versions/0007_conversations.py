"""Conversations, their turns, and one summary per conversation and day."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "id", name=op.f("pk_conversations")),
    )
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])
    op.create_table(
        "turns",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(200), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turns")),
        sa.UniqueConstraint("owner", "conversation_id", "seq", name="uq_turns_conversation_seq"),
        sa.ForeignKeyConstraint(
            ["owner", "conversation_id"],
            ["conversations.owner", "conversations.id"],
            name="fk_turns_conversation",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_turns_job_id", "turns", ["job_id"])
    op.create_index("ix_turns_created_at", "turns", ["created_at"])
    op.create_table(
        "summaries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("conversation_id", sa.String(200), nullable=False),
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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_summaries")),
        sa.UniqueConstraint(
            "owner", "conversation_id", "day", name="uq_summaries_conversation_day"
        ),
        sa.ForeignKeyConstraint(
            ["owner", "conversation_id"],
            ["conversations.owner", "conversations.id"],
            name="fk_summaries_conversation",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_summaries_day_status", "summaries", ["day", "status"])


def downgrade() -> None:
    op.drop_table("summaries")
    op.drop_table("turns")
    op.drop_table("conversations")
