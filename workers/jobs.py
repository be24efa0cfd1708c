"""Job rows as a worker updates them: claimed, then done or failed, each exactly once."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeGuard

from sqlalchemy import update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import database_boundary
from schemas.db import job_row_exists, one_statement
from schemas.db_clock import db_now
from schemas.errors import LlmqError
from schemas.events import JobOutcome, TokenLogprob
from schemas.jobs import JobStatus
from schemas.retry import retry_call
from schemas.tables import Job, as_utc
from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.conversations import record_turns

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs of a row it is about to run."""

    id: str
    request: dict[str, object]
    priority: str
    created_at: datetime
    started_at: datetime
    attempt: int
    claimed_monotonic: float
    """This host's monotonic clock as the claim was sent: elapsed time from here on is
    read off it (``started_at`` is the database's clock as the claim ran, so the claim's
    own round trip counts from here, not lost between the two clocks)."""
    deadline_at: datetime | None = None

    @property
    def queue_wait_ms(self) -> float:
        """From enqueue to claim, both on the database's clock."""
        return elapsed_ms(self.created_at, self.started_at)

    def ms_since_created(self) -> float:
        """From enqueue to now: the queue wait, then this host's monotonic clock."""
        return self.queue_wait_ms + (time.monotonic() - self.claimed_monotonic) * 1000.0


# Not settings (the row polls): their shape follows the claim's path, and their total is
# bounded by schemas.messages.ROW_WAIT_S.
# A producer writes the row of a message that carries its request right after pushing
# the message (producer.client); a worker that gets there first polls for it, for up
# to schemas.messages.ROW_WAIT_S. The row usually lands soon after the message, while the
# engine computes the first token (which waits for the claim): polled often at first,
# so a late row costs that token little, then less and less often.
ROW_POLL_DELAYS_S = (0.001,) * 20 + (0.005,) * 10 + (0.02, 0.05, 0.1, 0.25, 0.5)
ROW_POLL_MAX_DELAY_S = 1.0


def claim_job(
    sessions: sessionmaker[Session],
    job_id: str,
    worker_id: str,
    *,
    engine_warm: bool = True,
    row_wait_s: float = 0.0,
) -> ClaimedJob | None:
    """Mark a queued job running on this worker; None if it is not queued.

    Only a queued row can be claimed, so a redelivered message of a job that runs
    elsewhere or has ended is a no-op: one job never runs twice at once. (A job whose
    worker died is put back to queued by the reaper.) One ``UPDATE ... RETURNING``,
    in autocommit (no ``BEGIN`` or ``COMMIT`` round trips): the first token waits for
    it, the engine computing meanwhile only for an interactive job. ``created_at``,
    ``started_at`` and ``deadline_at`` all come from the database's clock, so the queue
    wait and the time left are right whatever this host's clock says.

    With ``row_wait_s``, a job with no row yet is waited for that long, its existence
    polled, then claimed; None if no row came.
    """
    claimed = _claim(sessions, job_id, worker_id, engine_warm=engine_warm)
    if claimed is not None or row_wait_s <= 0:
        return claimed
    deadline, polls = time.monotonic() + row_wait_s, _row_polls()
    while not _row_exists(sessions, job_id):
        if time.monotonic() >= deadline:
            log.warning(
                "job %s has no row %.0f s after its message; dropping it", job_id, row_wait_s
            )
            return None
        time.sleep(next(polls))
    # Claimed again even when the row was there at once: it may have been written
    # between the first claim and the look.
    return _claim(sessions, job_id, worker_id, engine_warm=engine_warm)


def _row_polls() -> Iterator[float]:
    yield from ROW_POLL_DELAYS_S
    yield from itertools.repeat(ROW_POLL_MAX_DELAY_S)


def _row_exists(sessions: sessionmaker[Session], job_id: str) -> bool:
    with database_boundary(f"look up job {job_id}"):
        return job_row_exists(sessions, job_id)


def _claim(
    sessions: sessionmaker[Session], job_id: str, worker_id: str, *, engine_warm: bool
) -> ClaimedJob | None:
    claim = (
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
        .values(
            status=JobStatus.RUNNING.value,
            started_at=db_now(),
            worker_id=worker_id,
            engine_warm=engine_warm,
            attempts=Job.attempts + 1,
        )
        .returning(
            Job.request,
            Job.priority,
            Job.created_at,
            Job.started_at,
            Job.attempts,
            Job.deadline_at,
        )
    )
    with database_boundary(f"claim job {job_id}"), one_statement(sessions) as connection:
        sent_at = time.monotonic()
        row = connection.execute(claim).one_or_none()
    if row is None:
        return None
    return ClaimedJob(
        id=job_id,
        request=dict(row.request),
        priority=row.priority,
        created_at=as_utc(row.created_at),
        started_at=as_utc(row.started_at),
        attempt=row.attempts,
        deadline_at=None if row.deadline_at is None else as_utc(row.deadline_at),
        claimed_monotonic=sent_at,
    )


def requeue_job(sessions: sessionmaker[Session], job_id: str, *, attempt: int) -> bool:
    """Put ``attempt`` of a running job that gave way back to queued, as the same
    attempt (nothing went wrong: its next run is that attempt again); False if the job
    ended or moved on meanwhile."""
    requeue = (
        update(Job)
        .where(
            Job.id == job_id,
            Job.status == JobStatus.RUNNING.value,
            Job.attempts == attempt,
        )
        .values(
            status=JobStatus.QUEUED.value,
            attempts=Job.attempts - 1,
        )
        .returning(Job.id)
    )
    with sessions.begin() as session:
        return session.execute(requeue).first() is not None


# What _still_ours checks of a loaded row, for a statement's WHERE.
_LIVE_STATUSES = [status.value for status in JobStatus if not status.is_final]


def finish_job(
    sessions: sessionmaker[Session],
    job_id: str,
    result: JobOutcome,
    *,
    attempt: int,
    in_conversation: bool = True,
    logprobs: Sequence[Sequence[TokenLogprob]] | None = None,
) -> bool:
    """Record ``result`` as the output of ``attempt``; False (nothing written) if the
    job ended or moved on to another attempt. ``logprobs``: each choice's tokens with
    their log probabilities, for a job that asked for them.

    A job outside a conversation (``in_conversation`` False) is recorded with one
    conditional ``UPDATE`` in autocommit: its final event waits for this write, and on
    PostgreSQL a locked read, the update and the transaction's ``BEGIN`` and ``COMMIT``
    were four round trips. A conversation's turns are written in the same transaction
    as its row (a job's turns exist exactly when its row says done).
    """
    usage, timings = result.usage, result.timings
    outcome = {
        "status": JobStatus.DONE.value,
        "queue_wait_ms": timings.queue_wait_ms,
        "output_text": result.text,
        "finish_reason": result.finish_reason,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_prompt_tokens": usage.cached_prompt_tokens,
        "ttft_ms": timings.ttft_ms,
        "total_ms": timings.total_ms,
        "finished_at": db_now(),
    }
    if result.choices is not None:
        outcome["output_choices"] = [choice.model_dump(mode="json") for choice in result.choices]
    if logprobs is not None:
        outcome["output_logprobs"] = [
            [token.model_dump(mode="json") for token in choice] for choice in logprobs
        ]
    if not in_conversation:
        finish = (
            update(Job)
            .where(
                Job.id == job_id,
                Job.attempts == attempt,
                Job.status.in_(_LIVE_STATUSES),
            )
            .values(outcome)
            .returning(Job.id)
        )
        with one_statement(sessions) as connection:
            return connection.execute(finish).first() is not None
    with sessions.begin() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if not _still_ours(job, attempt):
            return False
        for column, value in outcome.items():
            setattr(job, column, value)
        record_turns(session, job, answer=result.text, answer_tokens=usage.completion_tokens)
    return True


def fail_job(
    sessions: sessionmaker[Session],
    job_id: str,
    message: str,
    *,
    attempt: int,
    status: JobStatus = JobStatus.FAILED,
) -> bool:
    """Record why ``attempt`` ended without a result (``status``: failed or cancelled).

    False (nothing written) if the job ended or moved on to another attempt.
    """
    with sessions.begin() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if not _still_ours(job, attempt):
            return False
        job.status = status.value
        job.error = message
        job.finished_at = db_now()
    return True


def failure_message(exc: Exception, job_id: str) -> str:
    """What a job that raised ``exc`` fails with: an ``LlmqError``'s own words (written
    for the caller), else only the exception's class, its text and traceback going to
    the log alone (they may hold the request's data)."""
    if isinstance(exc, LlmqError):
        return str(exc)
    log.error("job %s failed unexpectedly", job_id, exc_info=exc)
    return f"internal worker error ({exc.__class__.__name__})"


def _still_ours(job: Job | None, attempt: int) -> TypeGuard[Job]:
    # A worker cut off for long enough is taken for dead and its job re-run; the
    # outcome of the attempt it was on no longer counts.
    return job is not None and not JobStatus(job.status).is_final and job.attempts == attempt


# About a minute in all: a database failover, not only a blip. The default of
# ``settings.timeouts.db_retry_delays_s``, for a caller without settings.
DB_RETRY_DELAYS_S = DEFAULT_TIMEOUTS.db_retry_delays_s


def with_db_retry(
    write: Callable[[], bool], *, what: str, delays: Sequence[float] | None = None
) -> bool | None:
    """Run a database write, retrying through an outage; return what it returned.

    ``delays`` are the waits between tries (None: ``DB_RETRY_DELAYS_S``). A job whose
    output exists must not lose its record to a database blip. None if the database
    stayed down (logged); the outcome is then still published.
    """
    waits = DB_RETRY_DELAYS_S if delays is None else delays
    try:
        return retry_call(write, delays=waits, retry_on=SQLAlchemyError, what=what)
    except SQLAlchemyError:
        log.exception("could not %s; the database stayed unavailable", what)
        return None


def elapsed_ms(start: datetime, end: datetime) -> float:
    """Milliseconds from ``start`` to ``end``, never negative."""
    return max(0.0, (as_utc(end) - as_utc(start)).total_seconds() * 1000.0)
