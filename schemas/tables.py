"""SQLAlchemy tables. Alembic migrations in ``migrations/`` create exactly these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Timezone-aware now, the only clock job rows use."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC time: SQLite hands back naive ones even for aware columns."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    """One generation request, from enqueue to its final text or error."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    idempotency_scope: Mapped[str] = mapped_column(String(32), default="", server_default="")
    """Whose idempotency keys these are: the owner, or '' for jobs without one.

    Not NULL, so two owner-less jobs with the same key still collide."""
    request_hash: Mapped[str | None] = mapped_column(String(64))
    """SHA-256 of the canonical request, to tell a replay from a reused key."""
    tier: Mapped[str] = mapped_column(String(16))
    priority: Mapped[str] = mapped_column(String(16))
    routing: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    engine_warm: Mapped[bool | None] = mapped_column(Boolean)
    owner: Mapped[str | None] = mapped_column(String(32), index=True)
    corrected_tier: Mapped[str | None] = mapped_column(String(16))
    output_text: Mapped[str | None] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    queue_wait_ms: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    total_ms: Mapped[float | None] = mapped_column(Float)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When the worker gives up on the job (the submitter's ``deadline_s``); None: no limit."""

    __table_args__ = (
        Index("ix_jobs_status_created_at", "status", "created_at"),
        # Idempotency keys are per owner: the same key from two owners makes two jobs.
        UniqueConstraint(
            "idempotency_scope", "idempotency_key", name="uq_jobs_idempotency_scope_key"
        ),
    )


class ApiKey(Base):
    """A gateway API key. Only a hash of the secret is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    rate_limit_per_min: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


metadata = Base.metadata
