"""Reading a batch's rows a page at a time: an upload's lines, and a batch's answered
lines and error lines in OpenAI's output shapes.

Every reader takes a :data:`Reader`, so one page may be read in a short session of its
own (a download that holds no connection while its client reads) or every page in a
session the caller holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TypeVar

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.status import BatchStatus, Tally
from producer.batches.views import error_line, job_error_code, output_line
from schemas.boundary import database_boundary
from schemas.jobs import JobStatus
from schemas.tables import Batch, BatchFileLine, BatchLineError, Job

READ_CHUNK = 500
UNFINISHED = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
Reader = Callable[[], AbstractContextManager[Session]]
"""Opens a session for one page of rows: a session factory (a short session per page)
or ``lambda: nullcontext(session)`` (every page in a session the caller holds)."""
Key = TypeVar("Key")
Item = TypeVar("Item")


def input_lines(
    session: Session, file_id: str, *, start: int = 0, stop: int | None = None
) -> Iterator[BatchFileLine]:
    """The stored lines of an upload from ``start`` to ``stop``, in order, a chunk at a time."""
    return paged_input_lines(lambda: nullcontext(session), file_id, start=start, stop=stop)


def keyset_pages(
    read: Reader,
    page: Callable[[Session, Key], Sequence[Item]],
    start: Key,
    next_key: Callable[[Item], Key],
) -> Iterator[Item]:
    """Every row of a keyset-paged read, a page per ``read``: ``page(session, key)``
    reads up to ``READ_CHUNK`` rows from ``key`` on, the next page starts at the last
    row's ``next_key``, and an empty page is the end."""
    key = start
    while True:
        with read() as session:
            rows = page(session, key)
        if not rows:
            return
        yield from rows
        key = next_key(rows[-1])


def paged_input_lines(
    read: Reader, file_id: str, *, start: int = 0, stop: int | None = None
) -> Iterator[BatchFileLine]:
    def page(session: Session, at: int) -> Sequence[BatchFileLine]:
        if stop is not None and at >= stop:
            return []
        query = select(BatchFileLine).where(
            BatchFileLine.file_id == file_id, BatchFileLine.line_no >= at
        )
        if stop is not None:
            query = query.where(BatchFileLine.line_no < stop)
        return session.scalars(query.order_by(BatchFileLine.line_no).limit(READ_CHUNK)).all()

    return keyset_pages(read, page, start, lambda line: line.line_no + 1)


def _jobs(read: Reader, *where: ColumnElement[bool]) -> Iterator[Job]:
    """Job rows matching ``where`` in (created_at, id) order, a page per read."""

    def page(session: Session, after: tuple[datetime, str] | None) -> Sequence[Job]:
        query = select(Job).where(*where)
        if after is not None:
            created, job_id = after
            query = query.where(
                (Job.created_at > created) | ((Job.created_at == created) & (Job.id > job_id))
            )
        return session.scalars(query.order_by(Job.created_at, Job.id).limit(READ_CHUNK)).all()

    return keyset_pages(read, page, None, lambda job: (job.created_at, job.id))


def _line_errors(read: Reader, batch_id: str) -> Iterator[BatchLineError]:
    def page(session: Session, after: int) -> Sequence[BatchLineError]:
        query = (
            select(BatchLineError)
            .where(BatchLineError.batch_id == batch_id, BatchLineError.line_no > after)
            .order_by(BatchLineError.line_no)
            .limit(READ_CHUNK)
        )
        return session.scalars(query).all()

    return keyset_pages(read, page, -1, lambda error: error.line_no)


def output_lines(session: Session, batch: Batch) -> Iterator[str]:
    """The batch's answered lines, in OpenAI's output shape."""
    return paged_output_lines(lambda: nullcontext(session), batch)


def paged_output_lines(read: Reader, batch: Batch) -> Iterator[str]:
    for job in _jobs(read, Job.batch_id == batch.id, Job.status == JobStatus.DONE.value):
        yield output_line(job)


def error_lines(session: Session, batch: Batch) -> Iterator[str]:
    """The batch's lines without an answer: invalid ones, jobs that ended otherwise,
    and, once the batch is over, jobs still unfinished and lines never enqueued."""
    return paged_error_lines(lambda: nullcontext(session), batch)


def paged_error_lines(read: Reader, batch: Batch) -> Iterator[str]:
    for error in _line_errors(read, batch.id):
        yield error_line(
            line_id=f"batch_req_{batch.id}_{error.line_no}",
            custom_id=error.custom_id,
            code=error.code,
            message=error.message,
        )
    over = BatchStatus(batch.status).is_final
    statuses = [s.value for s in JobStatus if s is not JobStatus.DONE]
    if not over:
        statuses = [s for s in statuses if s not in UNFINISHED]
    for job in _jobs(read, Job.batch_id == batch.id, Job.status.in_(statuses)):
        yield error_line(
            line_id=f"batch_req_{job.id}",
            custom_id=job.custom_id,
            code=job_error_code(job, batch.status),
            message=job.error or f"the request ended {job.status}",
            request_id=job.id,
        )
    if over and batch.enqueued < batch.total:
        code = "batch_expired" if batch.status == BatchStatus.EXPIRED else "batch_cancelled"
        for line in paged_input_lines(
            read, batch.input_file_id, start=batch.enqueued, stop=batch.total
        ):
            yield error_line(
                line_id=f"batch_req_{batch.id}_{line.line_no}",
                custom_id=line.custom_id,
                code=code,
                message=f"the batch was {batch.status} before this line was sent",
            )


# ---------------------------------------------------------------- batches


def tally(session: Session, batch: Batch) -> Tally:
    """Count where the batch's lines are, from its job rows and line errors."""
    by_status = dict(
        session.execute(
            select(Job.status, func.count()).where(Job.batch_id == batch.id).group_by(Job.status)
        ).all()
    )
    invalid = session.scalar(select(func.count()).where(BatchLineError.batch_id == batch.id))
    unfinished = sum(int(by_status.get(s, 0)) for s in UNFINISHED)
    done = int(by_status.get(JobStatus.DONE.value, 0))
    ended = sum(int(n) for n in by_status.values()) - unfinished - done
    return Tally(
        total=batch.total,
        handled=batch.enqueued,
        invalid=int(invalid or 0),
        done=done,
        ended=ended,
        unfinished=unfinished,
    )


def unfinished_jobs(sessions: sessionmaker[Session], batch_id: str) -> list[str]:
    """Ids of the batch's jobs still queued or running."""
    with database_boundary("read the batch's jobs"), sessions() as session:
        return list(
            session.scalars(
                select(Job.id).where(Job.batch_id == batch_id, Job.status.in_(UNFINISHED))
            )
        )
