"""SQLAlchemy tables. Alembic migrations in ``migrations/`` create exactly these."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKeyConstraint,
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
    output_choices: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    """Every choice (index, text, finish_reason) of a job that asked for several
    (``n``); ``output_text`` and ``finish_reason`` are the first one's. None otherwise."""
    output_logprobs: Mapped[list[list[dict[str, Any]]] | None] = mapped_column(JSON)
    """For a job that asked for log probabilities: each choice's tokens (by choice index),
    each a ``schemas.events.TokenLogprob``. None otherwise."""
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
    batch_id: Mapped[str | None] = mapped_column(String(40), index=True)
    """The batch this job answers one line of; None for a job submitted on its own."""
    custom_id: Mapped[str | None] = mapped_column(String(200))
    """The batch line's ``custom_id``, echoed in the batch's output."""

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


def _conversation_part(table: str, unique_by: str) -> tuple[UniqueConstraint, ForeignKeyConstraint]:
    """The constraints of a table whose rows belong to a conversation: one row per
    conversation and ``unique_by``, and each row gone with its conversation."""
    return (
        UniqueConstraint(
            "owner", "conversation_id", unique_by, name=f"uq_{table}_conversation_{unique_by}"
        ),
        ForeignKeyConstraint(
            ["owner", "conversation_id"],
            ["conversations.owner", "conversations.id"],
            name=f"fk_{table}_conversation",
            ondelete="CASCADE",
        ),
    )


class Conversation(Base):
    """A conversation, as one owner names it: its turns and nightly summaries hang off it.

    Keyed by owner and the caller's id together: another key that uses the same id
    has a conversation of its own and never sees or extends this one.
    """

    __tablename__ = "conversations"

    owner: Mapped[str] = mapped_column(String(32), primary_key=True)
    """The API key id (or client namespace) that submitted it; '' for none."""
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )


class Turn(Base):
    """One message of a conversation: a user message of a finished job, or its answer."""

    __tablename__ = "turns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(32))
    conversation_id: Mapped[str] = mapped_column(String(200))
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        *_conversation_part("turns", "seq"),
        Index("ix_turns_created_at", "created_at"),
    )


class Summary(Base):
    """The summary of one conversation's day, written by the nightly run."""

    __tablename__ = "summaries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(32))
    conversation_id: Mapped[str] = mapped_column(String(200))
    day: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(String(16))
    """pending (steps running), done, or failed (``error`` says why)."""
    text: Mapped[str | None] = mapped_column(Text)
    tier: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(200))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    """Summary jobs that failed and were sent again."""
    error: Mapped[str | None] = mapped_column(Text)
    stage: Mapped[str | None] = mapped_column(String(16))
    """The step in flight: map (chunks of a long conversation) or final."""
    step_jobs: Mapped[list[str]] = mapped_column(JSON, default=list)
    """Job ids of the step in flight, in chunk order."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        # One summary per conversation and day, whatever runs the night and how often.
        *_conversation_part("summaries", "day"),
        Index("ix_summaries_day_status", "day", "status"),
    )


class BatchFile(Base):
    """A file of the Batch API: an uploaded JSONL input, or a batch's output or errors.

    An input's lines are rows of ``batch_file_lines``; an output or error file has no
    rows of its own: its content is made from the batch's job rows when it is read.
    """

    __tablename__ = "batch_files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(32), index=True)
    purpose: Mapped[str] = mapped_column(String(16))
    """batch (an upload), batch_output or batch_error."""
    filename: Mapped[str] = mapped_column(String(255))
    bytes: Mapped[int] = mapped_column(Integer, default=0)
    lines: Mapped[int] = mapped_column(Integer, default=0)
    batch_id: Mapped[str | None] = mapped_column(String(40))
    """For an output or error file, the batch it belongs to."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class BatchFileLine(Base):
    """One non-blank line of an uploaded batch file, kept as uploaded."""

    __tablename__ = "batch_file_lines"

    file_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    line_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    """0-based, counting only the lines kept."""
    content: Mapped[str] = mapped_column(Text)
    custom_id: Mapped[str | None] = mapped_column(String(200))
    problem: Mapped[str | None] = mapped_column(Text)
    """Why the line cannot be run, found at upload (not JSON, duplicate custom_id)."""


class Batch(Base):
    """A Batch API batch: an input file whose lines run as batch-priority jobs."""

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(32), index=True)
    input_file_id: Mapped[str] = mapped_column(String(40))
    endpoint: Mapped[str] = mapped_column(String(64))
    completion_window: Mapped[str] = mapped_column(String(16))
    tier: Mapped[str] = mapped_column(String(16), default="auto")
    """Where every line goes: auto (each line's own ``model``) or a tier for them all."""
    status: Mapped[str] = mapped_column(String(16))
    total: Mapped[int] = mapped_column(Integer, default=0)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    enqueued: Mapped[int] = mapped_column(Integer, default=0)
    """Lines handled so far (a job submitted, or the line's error recorded): where a
    resumed enqueuer starts."""
    lease_owner: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Who is enqueuing the lines, and until when the claim holds without renewal."""
    output_file_id: Mapped[str | None] = mapped_column(String(40))
    error_file_id: Mapped[str | None] = mapped_column(String(40))
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    batch_metadata: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_batches_status", "status"),)


class BatchLineError(Base):
    """A batch line that became no job (malformed, refused at submit): its error."""

    __tablename__ = "batch_line_errors"

    batch_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    line_no: Mapped[int] = mapped_column(Integer, primary_key=True)
    custom_id: Mapped[str | None] = mapped_column(String(200))
    code: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class AbRun(Base):
    """One A/B gate run: which variants, on which cases, its figures and its verdict."""

    __tablename__ = "ab_runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    a: Mapped[str] = mapped_column(String(16))
    b: Mapped[str] = mapped_column(String(16), index=True)
    cases: Mapped[str] = mapped_column(String(255))
    """The case file's name and the SHA-256 of its content (``name#hash``)."""
    n: Mapped[int] = mapped_column(Integer)
    threshold_points: Mapped[float] = mapped_column(Float)
    verdict: Mapped[str] = mapped_column(String(16))
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Everything ``llmq ab --json`` printed: per-variant figures, the difference, flips."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TierPromotion(Base):
    """A decision that a base tier serves a variant's engine; the newest per tier holds."""

    __tablename__ = "tier_promotions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tier: Mapped[str] = mapped_column(String(16), index=True)
    variant: Mapped[str] = mapped_column(String(16))
    """What ``tier`` serves from now on; the tier's own name puts its configuration back."""
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The variant's engine settings as promoted (None: the tier's own configuration)."""
    ab_run_id: Mapped[str | None] = mapped_column(String(40))
    forced: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(Text)
    promoted_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


metadata = Base.metadata
