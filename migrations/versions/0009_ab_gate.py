"""The A/B quality gate: its runs, and promotions of a variant to serve a base tier."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.alter import create_keyed_table, timestamp

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    create_keyed_table(
        "ab_runs",
        sa.Column("a", sa.String(16), nullable=False),
        sa.Column("b", sa.String(16), nullable=False),
        sa.Column("cases", sa.String(255), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("threshold_points", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        timestamp("created_at", nullable=False),
        id_length=40,
    )
    op.create_index("ix_ab_runs_b", "ab_runs", ["b"])
    create_keyed_table(
        "tier_promotions",
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("variant", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("ab_run_id", sa.String(40), nullable=True),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("promoted_by", sa.String(200), nullable=False),
        timestamp("created_at", nullable=False),
        id_length=40,
    )
    op.create_index("ix_tier_promotions_tier", "tier_promotions", ["tier"])


def downgrade() -> None:
    op.drop_index("ix_tier_promotions_tier", table_name="tier_promotions")
    op.drop_table("tier_promotions")
    op.drop_index("ix_ab_runs_b", table_name="ab_runs")
    op.drop_table("ab_runs")
