"""The A/B quality gate: its runs, and promotions of a variant to serve a base tier."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "ab_runs",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("a", sa.String(16), nullable=False),
        sa.Column("b", sa.String(16), nullable=False),
        sa.Column("cases", sa.String(255), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("threshold_points", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ab_runs")),
    )
    op.create_index("ix_ab_runs_b", "ab_runs", ["b"])
    op.create_table(
        "tier_promotions",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("tier", sa.String(16), nullable=False),
        sa.Column("variant", sa.String(16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=True),
        sa.Column("ab_run_id", sa.String(40), nullable=True),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("promoted_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tier_promotions")),
    )
    op.create_index("ix_tier_promotions_tier", "tier_promotions", ["tier"])


def downgrade() -> None:
    op.drop_index("ix_tier_promotions_tier", table_name="tier_promotions")
    op.drop_table("tier_promotions")
    op.drop_index("ix_ab_runs_b", table_name="ab_runs")
    op.drop_table("ab_runs")
