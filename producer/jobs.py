"""Job rows as the producer writes and reads them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection, Sequence
from typing import cast

from sqlalchemy import Float, Table, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import DATABASE_ERRORS, database_boundary, database_error
from schemas.db import job_row_exists, one_statement
from schemas.db_clock import db_now
from schemas.embeddings import EmbeddingRequest
from schemas.errors import IdempotencyConflict, InvalidRequest, JobNotFound
from schemas.events import ChoiceOutput, FinalEvent, TerminalEvent, Timings, Usage, error_event
from schemas.jobs import CANCELLED_MESSAGE, JobStatus, could_be_job_id
from schemas.queues import Priority, Tier
from schemas.requests import GenerationRequest, RoutingDecision
from schemas.tables import Job, as_utc

"""The width of the id column."""


def new_job_id() -> str:
    """A random, unguessable job id (128 bits)."""
    return uuid.uuid4().hex


def fresh_job_id(job_id: str | None) -> str:
    """``job_id`` if it has :func:`new_job_id`'s form, a new id if None; raises
    ``InvalidRequest`` for any other id."""
    if job_id is None:
        return new_job_id()
    if not _JOB_ID_FORM.fullmatch(job_id):
        raise InvalidRequest("a job id given to submit must come from new_job_id()")
    return job_id


_JOB_ID_FORM = re.compile(r"[0-9a-f]{32}")


def insert_job(
    sessions: sessionmaker[Session],
    *,
    request: GenerationRequest | EmbeddingRequest,
    decision: RoutingDecision,
    priority: Priority,
    idempotency_key: str | None,
    owner: str | None = None,
    deadline_s: float | None = None,
    request_hash: str | None = None,
    job_id: str | None = None,
) -> tuple[Job, bool]:
    """Write a queued job row; return it and whether it is new.

    Idempotency keys belong to the owner (None is one owner of its own). With a key the
    same owner already used for the same request (same ``request_hash``), that job is
    returned instead; for a different request ``IdempotencyConflict`` is raised. Raises
    ``DatabaseUnavailable`` if the database refuses. A new job gets ``job_id`` (from
    :func:`new_job_id`) or a fresh id.
    """
    job = Job(
        id=fresh_job_id(job_id),
        idempotency_key=idempotency_key,
        idempotency_scope=owner or "",
        request_hash=request_hash,
        tier=decision.tier.value,
        priority=priority.value,
        routing=decision.model_dump(mode="json"),
        status=JobStatus.QUEUED.value,
        request=request.model_dump(mode="json"),
        attempts=0,
        owner=owner,
    )
    statement = _INSERT if deadline_s is None else _INSERT_WITH_DEADLINE
    params = _columns(job, skip=("created_at", "deadline_at")) | {"deadline_s": deadline_s}
    try:
        # A connection, not a session: nothing here needs the ORM's unit of work, and
        # the session's bookkeeping is a third of this write's time.
        with one_statement(sessions) as connection:
            times = connection.execute(statement, params).one()
        job.created_at = as_utc(times.created_at)
        job.deadline_at = None if times.deadline_at is None else as_utc(times.deadline_at)
        return job, True
    except IntegrityError as exc:
        if idempotency_key is None:
            # The only other unique column is the id; any other refusal is the database's.
            if job_id is not None and _id_taken(sessions, job_id):
                raise InvalidRequest("that job id is taken; ask new_job_id() for one") from None
            raise database_error(exc, doing="record the job") from exc
        existing = _by_idempotency_key(sessions, owner or "", idempotency_key)
        if (
            request_hash is not None
            and existing.request_hash is not None
            and existing.request_hash != request_hash
        ):
            raise IdempotencyConflict(
                f"idempotency key {idempotency_key!r} was already used for a different"
                " request; send the same request again or use a new key"
            ) from None
        return existing, False
    except DATABASE_ERRORS as exc:
        raise database_error(exc, doing="record the job") from exc


def _id_taken(sessions: sessionmaker[Session], job_id: str) -> bool:
    with database_boundary("record the job"):
        return job_row_exists(sessions, job_id)


def _columns(job: Job, *, skip: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        column.key: getattr(job, column.key)
        for column in Job.__table__.columns
        if column.key not in skip
    }


# Built once: a Core insert skips the ORM's unit of work and its per-call statement
# building, and this sits on every submit's path. Job times are the database's clock
# (schemas.db_clock), which every worker reads too.
_INSERT = (
    insert(cast(Table, Job.__table__))
    .values(created_at=db_now(), deadline_at=None)
    .returning(Job.created_at, Job.deadline_at)
)
_INSERT_WITH_DEADLINE = _INSERT.values(deadline_at=db_now(bindparam("deadline_s", type_=Float())))


def _by_idempotency_key(sessions: sessionmaker[Session], scope: str, key: str) -> Job:
    with database_boundary("look up the idempotency key"), sessions() as session:
        job = session.scalars(
            select(Job).where(Job.idempotency_scope == scope, Job.idempotency_key == key)
        ).one_or_none()
    if job is None:  # lost a race with a delete: treat as unknown
        raise JobNotFound(f"no job for idempotency key {key!r}")
    return job


def delete_job(sessions: sessionmaker[Session], job_id: str) -> None:
    """Remove a row whose message never reached the queue."""
    with database_boundary(f"roll back job {job_id}"), sessions.begin() as session:
        session.execute(delete(Job).where(Job.id == job_id))


def check_database(sessions: sessionmaker[Session]) -> None:
    """Open a connection and touch the jobs table; raises ``DatabaseUnavailable``."""
    probe = Job(
        id="warm-up-probe",
        idempotency_scope="",
        tier="small",
        priority="interactive",
        routing={},
        status=JobStatus.QUEUED.value,
        request={},
        attempts=0,
    )
    params = _columns(probe, skip=("created_at", "deadline_at")) | {"deadline_s": 1.0}
    with database_boundary("use the job database"), sessions() as session:
        # Insert and roll back: the connection opens and both insert statements are
        # compiled and cached, and nothing is written.
        for statement in (_INSERT, _INSERT_WITH_DEADLINE):
            session.execute(statement, params)
            session.rollback()


def probe_database(sessions: sessionmaker[Session]) -> None:
    """Read one id from the jobs table (nothing is written); raises ``DatabaseUnavailable``
    when the database cannot be reached or has no jobs table."""
    with database_boundary("use the job database"), sessions() as session:
        session.execute(select(Job.id).limit(1)).first()


def cancel_if_queued(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Mark a job that no worker has claimed yet as cancelled; False if it was not queued.

    One conditional ``UPDATE``, so a worker's claim and a cancel cannot both win.
    """
    cancel = (
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, error=CANCELLED_MESSAGE, finished_at=db_now())
        .returning(Job.id)
    )
    with database_boundary(f"cancel job {job_id}"), sessions.begin() as session:
        return session.execute(cancel).first() is not None


def cancel_batch_rows(
    sessions: sessionmaker[Session],
    batch_id: str,
    *,
    scope: str = "",
    keys: Sequence[str] = (),
) -> tuple[list[str], list[str]]:
    """Cancel every queued job of a batch in one conditional ``UPDATE``; the ids it
    cancelled, and the ids of the batch's jobs still running (their workers must be
    asked to stop). ``keys``: idempotency keys (of ``scope``) of jobs that belong to
    the batch but may not be linked to it yet. Raises ``DatabaseUnavailable``."""
    mine = Job.batch_id == batch_id
    if keys:
        mine = mine | ((Job.idempotency_scope == scope) & Job.idempotency_key.in_(list(keys)))
    queued = (
        update(Job)
        .where(mine, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.CANCELLED.value, error=CANCELLED_MESSAGE, finished_at=db_now())
        .returning(Job.id)
    )
    running = select(Job.id).where(mine, Job.status == JobStatus.RUNNING.value)
    with database_boundary(f"cancel the jobs of batch {batch_id}"), sessions.begin() as session:
        cancelled = list(session.scalars(queued))
        still_running = list(session.scalars(running))
    return cancelled, still_running


def load_job(sessions: sessionmaker[Session], job_id: str) -> Job:
    """The job row; raises ``JobNotFound`` or ``DatabaseUnavailable``."""
    if not could_be_job_id(job_id):
        # The database would refuse to compare it (NUL, a lone surrogate): no such job.
        raise JobNotFound(f"no job with id {job_id!r}")
    with database_boundary(f"read job {job_id}"), sessions() as session:
        job = session.get(Job, job_id)
    if job is None:
        raise JobNotFound(f"no job with id {job_id}")
    return job


# Ids per query in ``ended_rows``: well under every database's limit on parameters.
ROWS_PER_QUERY = 500


def ended_rows(
    sessions: sessionmaker[Session], job_ids: Collection[str]
) -> tuple[dict[str, Job], set[str]]:
    """Of ``job_ids``, the rows of the jobs that ended, and the ids that have a row at
    all: one query for the statuses, and one for the ended rows, per
    ``ROWS_PER_QUERY`` ids. Raises ``DatabaseUnavailable``."""
    wanted = sorted({job_id for job_id in job_ids if could_be_job_id(job_id)})
    ended: dict[str, Job] = {}
    found: set[str] = set()
    final = [status.value for status in JobStatus if status.is_final]
    with database_boundary("read job rows"), sessions() as session:
        for start in range(0, len(wanted), ROWS_PER_QUERY):
            chunk = wanted[start : start + ROWS_PER_QUERY]
            statuses = session.execute(select(Job.id, Job.status).where(Job.id.in_(chunk))).all()
            found.update(job_id for job_id, _status in statuses)
            done = [job_id for job_id, status in statuses if status in final]
            if done:
                rows = session.scalars(select(Job).where(Job.id.in_(done)))
                ended.update((job.id, job) for job in rows)
    return ended, found


def terminal_event_from_row(job: Job, seq: int) -> TerminalEvent | None:
    """The final event a finished row stands for, or None while it still runs.

    Used when a stream's replay log has expired but the row still holds the outcome.
    """
    if job.status == JobStatus.DONE:
        return FinalEvent(
            seq=seq,
            text=job.output_text or "",
            finish_reason=job.finish_reason,
            usage=Usage(
                prompt_tokens=job.prompt_tokens or 0, completion_tokens=job.completion_tokens or 0
            ),
            timings=Timings(
                queue_wait_ms=job.queue_wait_ms or 0.0,
                ttft_ms=job.ttft_ms,
                total_ms=job.total_ms or 0.0,
            ),
            worker_id=job.worker_id or "",
            choices=[ChoiceOutput.model_validate(c) for c in job.output_choices]
            if job.output_choices is not None
            else None,
        )
    if JobStatus(job.status).is_final:
        return error_event(seq, job.error or f"the job ended {job.status}", job.status)
    return None


def routed_tier_of(job: Job) -> Tier | None:
    """For an ``auto`` job, the tier the classifier chose (its routing's
    ``routed_tier``); None for an explicit tier or a row from before it was kept."""
    routed = (job.routing or {}).get("routed_tier")
    return Tier(routed) if routed else None
