"""Sending a batch's lines as batch-priority jobs, a chunk at a time, resumably.

Whoever enqueues a batch (the gateway's background runner, or ``llmq batch submit``)
first claims it with a lease on its row, so two processes never feed the same batch;
a claim that is not renewed lapses, and another process resumes. Progress is the
row's ``enqueued`` count, advanced in the same transaction that links the chunk's jobs
to the batch, and each line is submitted with an idempotency key of its own: a
chunk replayed after a crash finds its jobs instead of making them twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.lines import BatchLine, LineInvalid, parse_line
from producer.batches.results import input_lines
from producer.batches.status import BatchStatus
from producer.batches.store import line_key, refresh_batch
from producer.client import Client
from schemas.boundary import database_boundary
from schemas.errors import IdempotencyConflict, InvalidRequest, PromptTooLong, QueueFull
from schemas.queues import Priority, Tier
from schemas.tables import Batch, BatchFileLine, BatchLineError, Job, as_utc, utcnow

log = logging.getLogger(__name__)

LEASE = timedelta(seconds=60)
"""How long a claim on a batch's lines lasts without being renewed: a feeder that
died releases its batch to the others after this."""
CHUNK = 200
# Not a setting: a cap on one wait inside a loop; the queue's Retry-After sets the pace.
MAX_FULL_WAIT_S = 5.0
"""The longest single wait for room on a full batch queue before looking again."""

Progress = Callable[[int, int], None]
"""(lines handled, lines in all) after every chunk."""


class _Stopped(Exception):
    """The enqueuer's process is shutting down."""


class LostClaim(Exception):
    """Another process took the batch over (this one's lease lapsed)."""


@dataclass
class _Chunk:
    start: int
    links: list[dict[str, Any]]
    errors: list[dict[str, Any]]

    @property
    def end(self) -> int:
        return self.start + len(self.links) + len(self.errors)


def claim(sessions: sessionmaker[Session], batch_id: str, holder: str) -> Batch | None:
    """Take the batch's enqueue lease, if no live one is held; the row, or None."""
    now = utcnow()
    with database_boundary("claim the batch"), sessions.begin() as session:
        taken = session.execute(
            update(Batch)
            .where(
                Batch.id == batch_id,
                Batch.status.in_([BatchStatus.VALIDATING.value, BatchStatus.IN_PROGRESS.value]),
                Batch.enqueued < Batch.total,
                (Batch.lease_until.is_(None)) | (Batch.lease_until <= now),
            )
            .values(lease_owner=holder, lease_until=now + LEASE)
            .returning(Batch.id)
        ).first()
        if taken is None:
            return None
        session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.status == BatchStatus.VALIDATING.value)
            .values(status=BatchStatus.IN_PROGRESS.value, in_progress_at=now)
        )
        return session.get(Batch, batch_id)


def _renew(sessions: sessionmaker[Session], batch_id: str, holder: str) -> BatchStatus:
    """Extend the lease; the batch's status. Raises ``LostClaim``."""
    with database_boundary("renew the batch's claim"), sessions.begin() as session:
        row = session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.lease_owner == holder)
            .values(lease_until=utcnow() + LEASE)
            .returning(Batch.status)
        ).first()
    if row is None:
        raise LostClaim(batch_id)
    return BatchStatus(row[0])


def _release(sessions: sessionmaker[Session], batch_id: str, holder: str) -> None:
    with database_boundary("release the batch"), sessions.begin() as session:
        session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.lease_owner == holder)
            .values(lease_owner=None, lease_until=None)
        )


def enqueue_batch(
    client: Client,
    batch_id: str,
    *,
    holder: str,
    chunk: int = CHUNK,
    on_progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
    stopping: Callable[[], bool] = lambda: False,
) -> bool:
    """Send the batch's remaining lines as batch-priority jobs; False if another
    process holds it (or nothing is left to send).

    Lines are read a chunk at a time from the database, never the whole file. A full
    batch queue is waited out (``QueueFull`` is never passed on); a line that cannot
    become a job (malformed, unknown prompt, too long for its tier) is recorded as that
    line's error. Stops early when the batch is cancelled or its window ends. Raises
    ``BrokerUnavailable`` or ``DatabaseUnavailable`` (the claim is released, so a later
    call resumes where this one stopped).
    """
    sessions = client.sessions
    batch = claim(sessions, batch_id, holder)
    if batch is None:
        return False
    expires_at = as_utc(batch.expires_at)
    try:
        while batch.enqueued < batch.total:
            status = _renew(sessions, batch_id, holder)
            if status is not BatchStatus.IN_PROGRESS or utcnow() >= expires_at:
                break
            stop = min(batch.total, batch.enqueued + chunk)
            pending = _send_chunk(
                client,
                batch,
                stop,
                expires_at=expires_at,
                holder=holder,
                sleep=partial(_sleep_unless, stopping, sleep),
            )
            _record(sessions, batch_id, holder, pending)
            batch.enqueued = pending.end
            if on_progress is not None:
                on_progress(batch.enqueued, batch.total)
            if pending.end < stop:
                break
        if _renew(sessions, batch_id, holder) is BatchStatus.CANCELLING:
            # Jobs linked after the cancel looked for them: cancel them too.
            client.cancel_batch_jobs(batch_id)
    except LostClaim:
        log.warning("batch %s was taken over by another enqueuer", batch_id)
        return True
    finally:
        _release(sessions, batch_id, holder)
    refresh_batch(sessions, batch_id, cancel_batch_jobs=client.cancel_batch_jobs)
    return True


def _send_chunk(
    client: Client,
    batch: Batch,
    stop: int,
    *,
    expires_at: datetime,
    holder: str,
    sleep: Callable[[float], None],
) -> _Chunk:
    """Send lines ``batch.enqueued`` to ``stop``; fewer when the batch or process stops."""
    pending = _Chunk(start=batch.enqueued, links=[], errors=[])
    with database_boundary("read the batch's lines"), client.sessions() as reader:
        lines = list(input_lines(reader, batch.input_file_id, start=pending.start, stop=stop))
    for line in lines:
        try:
            outcome = _send_line(
                client, batch, line, expires_at=expires_at, holder=holder, sleep=sleep
            )
        except _Stopped:
            break
        if outcome is None:  # cancelled or expired while waiting for room
            break
        (pending.links if "id" in outcome else pending.errors).append(outcome)
    return pending


def _sleep_unless(
    stopping: Callable[[], bool], sleep: Callable[[float], None], seconds: float
) -> None:
    if stopping():
        raise _Stopped
    if seconds > 0:
        sleep(seconds)


def _send_line(
    client: Client,
    batch: Batch,
    line: BatchFileLine,
    *,
    expires_at: datetime,
    holder: str,
    sleep: Callable[[float], None],
) -> dict[str, Any] | None:
    """Submit one line: a job link, an error row, or None when the batch stopped."""

    def error(code: str, message: str) -> dict[str, Any]:
        return {
            "batch_id": batch.id,
            "line_no": line.line_no,
            "custom_id": line.custom_id,
            "code": code,
            "message": message,
        }

    sleep(0)  # raises _Stopped when the process shuts down
    if line.problem is not None:
        return error("invalid_request", line.problem)
    settings = client.settings
    try:
        parsed = parse_line(
            line.content,
            endpoint=batch.endpoint,
            max_messages=settings.max_messages,
            max_message_chars=settings.max_message_chars,
        )
        job_id = _submit_when_room(
            client, batch, line.line_no, parsed, expires_at=expires_at, holder=holder, sleep=sleep
        )
    except LineInvalid as exc:
        return error(exc.code, str(exc))
    except PromptTooLong as exc:
        return error("context_length_exceeded", str(exc))
    except InvalidRequest as exc:
        return error("invalid_request", str(exc))
    if job_id is None:
        return None
    return {"id": job_id, "batch_id": batch.id, "custom_id": parsed.custom_id}


def _submit_when_room(
    client: Client,
    batch: Batch,
    line_no: int,
    line: BatchLine,
    *,
    expires_at: datetime,
    holder: str,
    sleep: Callable[[float], None],
) -> str | None:
    """The line's job id, once its queue had room; None if the batch stopped meanwhile."""
    while True:
        remaining = (expires_at - utcnow()).total_seconds()
        if remaining <= 0:
            return None
        try:
            return _submit(client, batch, line_no, line, deadline_s=remaining)
        except QueueFull as exc:
            # Batch work waits for room; it never fails for a full queue.
            sleep(min(MAX_FULL_WAIT_S, max(0.2, float(exc.retry_after_s or 1))))
            status = _renew(client.sessions, batch.id, holder)
            if status is not BatchStatus.IN_PROGRESS or utcnow() >= expires_at:
                return None


def _submit(
    client: Client, batch: Batch, line_no: int, line: BatchLine, *, deadline_s: float
) -> str:
    key = line_key(batch.id, line_no)
    try:
        if line.model == Tier.EMBED:
            handle = client.submit_embeddings(
                line.request,
                priority=Priority.BATCH,
                idempotency_key=key,
                owner=batch.owner,
                deadline_s=deadline_s,
            )
        else:
            handle = client.submit(
                line.request,
                tier=line.model if batch.tier == "auto" else batch.tier,
                priority=Priority.BATCH,
                idempotency_key=key,
                owner=batch.owner,
                # The window's end is the job's deadline: a line still queued then never runs.
                deadline_s=deadline_s,
            )
    except IdempotencyConflict:
        # A resumed chunk: the line's job exists, submitted with a longer deadline.
        with database_boundary("find the line's job"), client.sessions() as session:
            job_id = session.scalar(
                select(Job.id).where(
                    Job.idempotency_scope == (batch.owner or ""), Job.idempotency_key == key
                )
            )
        if job_id is None:
            raise
        return job_id
    return handle.job_id


def _record(sessions: sessionmaker[Session], batch_id: str, holder: str, chunk: _Chunk) -> None:
    """Link the chunk's jobs and store its errors, moving the batch's progress on, at once."""
    with database_boundary("record the batch's progress"), sessions.begin() as session:
        moved = session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.lease_owner == holder, Batch.enqueued == chunk.start)
            .values(enqueued=chunk.end, lease_until=utcnow() + LEASE)
            .returning(Batch.id)
        ).first()
        if moved is None:
            raise LostClaim(batch_id)
        if chunk.links:
            session.execute(update(Job), chunk.links)
        if chunk.errors:
            session.execute(insert(BatchLineError), chunk.errors)
