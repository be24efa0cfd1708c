"""Batch files and batches as rows: upload, create, look up, list, refresh, cancel, read.

Every lookup takes ``owner``: a string is the caller's namespace (an API key id), and
a row of another owner does not exist for it (``NotFound``, never "forbidden"); None
means no check (a gateway without keys, an operator's CLI). An upload's lines are
stored by :mod:`producer.batches.uploads`; pages of rows are read by
:mod:`producer.batches.results`, and a file's content for a download by
:mod:`producer.batches.content`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, Protocol, TypeVar

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from producer.batches.lines import EMBEDDINGS_ENDPOINT, ENDPOINTS
from producer.batches.results import (
    error_lines,
    output_lines,
    tally,
    unfinished_jobs,
)
from producer.batches.status import ACTIVE, BatchStatus, next_status, parse_window
from producer.batches.uploads import forget_lines, store_lines
from schemas.boundary import database_boundary
from schemas.errors import InUse, InvalidRequest, JobNotFound, QuotaExceeded
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import Batch, BatchFile, BatchFileLine, as_utc, utcnow

INPUT_PURPOSE = "batch"
OUTPUT_PURPOSE = "batch_output"
ERROR_PURPOSE = "batch_error"
MAX_LINES = 50_000
"""Request lines in one batch file, at most (OpenAI's limit)."""
MAX_LIST_LIMIT = 100

QUOTA_RETRY_S = 60
"""Retry-After of a quota refusal: about when a batch may have ended or a file been deleted."""
DELETE_CHUNK = 5000

CancelJob = Callable[[str], None]
"""Cancels one job by its id."""
UNLINKED_SPAN = 400
"""Lines past a batch's ``enqueued`` whose jobs may exist unlinked (a chunk being sent,
or left by a gateway that died sending it): a cancel reaches them by their keys."""


class CancelBatchJobs(Protocol):
    """Cancels every unfinished job of a batch at once: those linked to it by the
    batch's id, and those with one of ``keys`` (idempotency keys of ``scope``)."""

    def __call__(self, batch_id: str, *, scope: str = ..., keys: Sequence[str] = ...) -> object:
        """Cancel them; what is returned is not used."""


def line_key(batch_id: str, line_no: int) -> str:
    """The idempotency key of a batch's line: the same line is never two jobs."""
    return f"{batch_id}:{line_no}"


@dataclass(frozen=True)
class Quotas:
    """What one owner (API key) may hold: uploaded files and their bytes, and batches
    and their request lines not yet ended. ``None`` owners (no keys) have no quotas."""

    files: int
    stored_bytes: int
    batches: int
    lines: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Quotas:
        return cls(
            files=settings.key_max_files,
            stored_bytes=settings.key_max_stored_bytes,
            batches=settings.key_max_batches_in_flight,
            lines=settings.key_max_batch_lines_in_flight,
        )


class NotFound(JobNotFound):
    """No such file or batch, or not the caller's."""


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


# ---------------------------------------------------------------- files


def create_file(
    sessions: sessionmaker[Session],
    stream: IO[bytes],
    *,
    filename: str,
    purpose: str,
    owner: str | None,
    max_line_bytes: int,
    max_lines: int = MAX_LINES,
    quotas: Quotas | None = None,
    pace: Callable[[int], None] | None = None,
) -> BatchFile:
    """Store an uploaded JSONL file line by line (never all of it, nor more than one
    line of ``max_line_bytes``, in memory).

    Blank lines are dropped. A line that is not UTF-8 or repeats an earlier
    ``custom_id`` is kept with its problem noted, and becomes that line's error when
    the batch runs. Lines are written ``INSERT_CHUNK`` at a time, each chunk its own
    short transaction (a large file never holds SQLite's write lock for long), and the
    file's row last, so the file exists only once all of it is stored. ``pace`` (see
    :func:`producer.batches.uploads.store_lines`) may slow the chunks to a budget. Raises
    ``InvalidRequest`` for a purpose other than ``batch``, a file without lines, a line
    longer than ``max_line_bytes`` or more than ``max_lines`` lines (nothing is kept);
    ``QuotaExceeded`` when the owner already holds ``quotas.files`` files, or this one
    would take its stored bytes past ``quotas.stored_bytes`` (checked before reading
    and again as the file's row is written; nothing is kept); ``DatabaseUnavailable``.
    """
    if purpose != INPUT_PURPOSE:
        raise InvalidRequest(f"purpose must be {INPUT_PURPOSE!r}, not {purpose!r}")
    if quotas is not None and owner is not None:
        with database_boundary("check the key's file quota"), sessions() as session:
            _check_file_quota(session, owner, quotas, adding=0)
    row = BatchFile(
        id=new_file_id(),
        owner=owner,
        purpose=purpose,
        filename=(filename or "upload.jsonl")[:255],
        bytes=0,
        lines=0,
        created_at=utcnow(),
    )
    try:
        row.bytes, row.lines = store_lines(
            sessions, stream, row.id, max_line_bytes, max_lines, pace=pace
        )
        with database_boundary("store the uploaded file"), sessions.begin() as session:
            if quotas is not None and owner is not None:
                _check_file_quota(session, owner, quotas, adding=row.bytes)
            session.add(row)
    except BaseException:
        forget_lines(sessions, row.id)
        raise
    return row


def _quota_reached(message: str, quota: str) -> QuotaExceeded:
    """The refusal for ``quota``, with the Retry-After every quota refusal carries."""
    return QuotaExceeded(message, quota=quota, retry_after_s=QUOTA_RETRY_S)


def _count_and_sum(
    session: Session, summed: InstrumentedAttribute[int], *where: ColumnElement[bool]
) -> tuple[int, int]:
    """How many rows match ``where``, and the sum of ``summed`` over them (0 for none):
    what a quota on a count and a total checks."""
    count, total = session.execute(
        select(func.count(), func.coalesce(func.sum(summed), 0)).where(*where)
    ).one()
    return int(count), int(total)


def _check_file_quota(session: Session, owner: str, quotas: Quotas, *, adding: int) -> None:
    """Raise ``QuotaExceeded`` if ``owner`` may not store one more file of ``adding``
    bytes (with 0: if it is already at either quota)."""
    count, size = _count_and_sum(
        session, BatchFile.bytes, BatchFile.owner == owner, BatchFile.purpose == INPUT_PURPOSE
    )
    if count >= quotas.files:
        raise _quota_reached(
            f"file quota reached: this key stores {count} files, the limit is "
            f"{quotas.files}; delete some (DELETE /v1/files/{{id}}) to upload more",
            "files",
        )
    if size + adding > quotas.stored_bytes or (adding == 0 and size >= quotas.stored_bytes):
        raise _quota_reached(
            f"stored bytes quota reached: this key stores {size} bytes of files"
            + (f", and this upload adds {adding}" if adding else "")
            + f"; the limit is {quotas.stored_bytes}; delete files to upload more",
            "stored_bytes",
        )


def _could_be_id(value: str) -> bool:
    """Whether ``value`` could name a row: no NUL, valid Unicode. The database would
    refuse to compare anything else (a 503 for what is only a missing row)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def get_file(sessions: sessionmaker[Session], file_id: str, *, owner: str | None) -> BatchFile:
    """The file's row; raises ``NotFound`` (also for another owner's file)."""
    return _owned_row(sessions, BatchFile, file_id, owner=owner, noun="file")


Owned = TypeVar("Owned", BatchFile, Batch)


def _owned_row(
    sessions: sessionmaker[Session],
    table: type[Owned],
    row_id: str,
    *,
    owner: str | None,
    noun: str,
) -> Owned:
    """The row of ``table`` with id ``row_id`` if ``owner`` may see it (None: anyone);
    raises ``NotFound`` naming the ``noun``."""
    if not _could_be_id(row_id):
        raise NotFound(f"no {noun} with id {row_id!r}")
    with database_boundary(f"read the {noun}"), sessions() as session:
        row = session.get(table, row_id[:40])
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"no {noun} with id {row_id}")
    return row


def delete_file(sessions: sessionmaker[Session], file_id: str, *, owner: str | None) -> str:
    """Delete a file and its stored lines; its id.

    The file's row goes first, in a transaction that finds no unfinished batch using
    it, so it is gone for every reader at once; its lines follow in short
    transactions of ``DELETE_CHUNK``. Raises ``NotFound`` (also for another owner's
    file), ``InUse`` while a batch not yet ended reads it, ``DatabaseUnavailable``.
    """
    row = get_file(sessions, file_id, owner=owner)
    with database_boundary("delete the file"), sessions.begin() as session:
        user = session.scalar(
            select(Batch.id)
            .where(
                Batch.input_file_id == row.id,
                Batch.status.in_([s.value for s in ACTIVE]),
            )
            .limit(1)
        )
        if user is not None:
            raise InUse(f"file {row.id} is the input of batch {user}, which has not ended")
        gone = session.execute(delete(BatchFile).where(BatchFile.id == row.id))
    if gone.rowcount == 0:  # type: ignore[attr-defined]
        raise NotFound(f"no file with id {file_id}")
    if row.purpose == INPUT_PURPOSE:
        _drop_lines(sessions, row.id, row.lines)
    return row.id


def _drop_lines(sessions: sessionmaker[Session], file_id: str, lines: int) -> None:
    for start in range(0, max(lines, 1), DELETE_CHUNK):
        with database_boundary("delete the file's lines"), sessions.begin() as session:
            session.execute(
                delete(BatchFileLine).where(
                    BatchFileLine.file_id == file_id,
                    BatchFileLine.line_no < start + DELETE_CHUNK,
                )
            )


def create_batch(
    sessions: sessionmaker[Session],
    *,
    input_file_id: str,
    endpoint: str,
    completion_window: str,
    owner: str | None,
    tier: str = "auto",
    metadata: dict[str, Any] | None = None,
    quotas: Quotas | None = None,
) -> Batch:
    """A new batch (status validating) over an uploaded file of the same owner.

    Raises ``InvalidRequest`` (unknown endpoint or tier, bad window, a file that is
    not a batch input), ``NotFound`` (no such file for this owner), ``QuotaExceeded``
    (the owner has ``quotas.batches`` batches not yet ended, or their lines and this
    file's would pass ``quotas.lines``).
    """
    if endpoint not in ENDPOINTS:
        raise InvalidRequest(f"endpoint must be one of {', '.join(ENDPOINTS)}, not {endpoint!r}")
    if tier != "auto" and tier not in {t.value for t in Tier}:
        raise InvalidRequest(f"unknown tier {tier!r}")
    if endpoint == EMBEDDINGS_ENDPOINT and tier != "auto":
        raise InvalidRequest("an embeddings batch runs on the embed tier: leave its tier unset")
    window = parse_window(completion_window)
    source = get_file(sessions, input_file_id, owner=owner)
    if source.purpose != INPUT_PURPOSE:
        raise InvalidRequest(f"file {input_file_id} is not a batch input (purpose batch)")
    now = utcnow()
    row = Batch(
        id=new_batch_id(),
        owner=source.owner if owner is None else owner,
        input_file_id=source.id,
        endpoint=endpoint,
        completion_window=completion_window,
        tier=tier,
        status=BatchStatus.VALIDATING.value,
        total=source.lines,
        completed=0,
        failed=0,
        enqueued=0,
        batch_metadata=metadata,
        created_at=now,
        expires_at=now + window,
    )
    with database_boundary("record the batch"), sessions.begin() as session:
        if session.get(BatchFile, source.id) is None:  # deleted meanwhile
            raise NotFound(f"no file with id {input_file_id}")
        if quotas is not None and owner is not None:
            _check_batch_quota(session, owner, quotas, adding=source.lines)
        session.add(row)
    return row


def upload_batch(
    sessions: sessionmaker[Session],
    stream: IO[bytes],
    *,
    filename: str,
    owner: str | None,
    max_line_bytes: int,
    completion_window: str = "24h",
    tier: str = "auto",
) -> Batch:
    """A batch of chat completions over ``stream``, uploaded as a batch input file of
    ``owner`` first: :func:`create_file`, then :func:`create_batch` (no quotas); raises
    what those raise."""
    uploaded = create_file(
        sessions,
        stream,
        filename=filename,
        purpose=INPUT_PURPOSE,
        owner=owner,
        max_line_bytes=max_line_bytes,
    )
    return create_batch(
        sessions,
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window=completion_window,
        owner=owner,
        tier=tier,
    )


def _check_batch_quota(session: Session, owner: str, quotas: Quotas, *, adding: int) -> None:
    count, lines = _count_and_sum(
        session, Batch.total, Batch.owner == owner, Batch.status.in_([s.value for s in ACTIVE])
    )
    if count >= quotas.batches:
        raise _quota_reached(
            f"batches in flight quota reached: this key has {count} batches not yet "
            f"ended, the limit is {quotas.batches}",
            "batches_in_flight",
        )
    if lines + adding > quotas.lines:
        raise _quota_reached(
            f"lines in flight quota reached: this key's unfinished batches hold "
            f"{lines} lines and this one adds {adding}; the limit is {quotas.lines}",
            "lines_in_flight",
        )


def get_batch(sessions: sessionmaker[Session], batch_id: str, *, owner: str | None) -> Batch:
    """The batch's row as stored; raises ``NotFound`` (also for another owner's)."""
    return _owned_row(sessions, Batch, batch_id, owner=owner, noun="batch")


def list_batches(
    sessions: sessionmaker[Session], *, owner: str | None, limit: int = 20, after: str | None
) -> tuple[list[Batch], bool]:
    """The owner's batches, newest first, after the batch ``after``; and whether more follow."""
    limit = max(1, min(limit, MAX_LIST_LIMIT))
    query = select(Batch).order_by(Batch.created_at.desc(), Batch.id.desc())
    if owner is not None:
        query = query.where(Batch.owner == owner)
    if after is not None and not _could_be_id(after):
        raise NotFound(f"no batch with id {after!r}")
    with database_boundary("list the batches"), sessions() as session:
        if after is not None:
            anchor = session.get(Batch, after[:40])
            if anchor is None or (owner is not None and anchor.owner != owner):
                raise NotFound(f"no batch with id {after}")
            query = query.where(
                (Batch.created_at < anchor.created_at)
                | ((Batch.created_at == anchor.created_at) & (Batch.id < anchor.id))
            )
        rows = list(session.scalars(query.limit(limit + 1)))
    return rows[:limit], len(rows) > limit


def refresh_batch(
    sessions: sessionmaker[Session],
    batch_id: str,
    *,
    cancel_job: CancelJob | None = None,
    cancel_batch_jobs: CancelBatchJobs | None = None,
) -> Batch:
    """Recompute the batch's counts and status from its job rows; store and return it.

    A batch past its window becomes ``expired`` and its unfinished jobs are cancelled
    (all at once by ``cancel_batch_jobs``, else one by one by ``cancel_job``); one
    whose every line has a result becomes ``completed`` (through ``finalizing``) with
    its output and error files. Safe to run anywhere, any number of times at once:
    each change of status is one conditional ``UPDATE``, and the result files are
    written in its transaction, only by the call whose ``UPDATE`` won.
    """
    with database_boundary("refresh the batch"), sessions() as session:
        batch = session.get(Batch, batch_id)
        if batch is None:
            raise NotFound(f"no batch with id {batch_id}")
        status = BatchStatus(batch.status)
        if status.is_final:
            return batch
        counts = tally(session, batch)
        now = utcnow()
        enqueuing = batch.lease_until is not None and as_utc(batch.lease_until) > now
        new = next_status(
            status, counts, now=now, expires_at=as_utc(batch.expires_at), enqueuing=enqueuing
        )
    if new is BatchStatus.EXPIRED:
        cancel_unfinished(sessions, batch, cancel_job, cancel_batch_jobs)
    values: dict[str, Any] = {"completed": counts.done, "failed": counts.failed}
    files: list[BatchFile] = []
    if new is not status:
        values |= _transition(new, now)
        if new.is_final:
            files = _result_files(sessions, batch, new)
            for file in files:
                column = "output_file_id" if file.purpose == OUTPUT_PURPOSE else "error_file_id"
                values[column] = file.id
    with database_boundary("refresh the batch"), sessions.begin() as session:
        moved = session.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.status == status.value)
            .values(values)
            .returning(Batch.id)
        ).first()
        # Only the call whose UPDATE won writes the files its row now names: two
        # refreshes at once never leave a file no batch points to.
        if moved is not None:
            session.add_all(files)
    with database_boundary("refresh the batch"), sessions() as session:
        fresh = session.get(Batch, batch_id)
    assert fresh is not None
    return fresh


def _transition(new: BatchStatus, now: datetime) -> dict[str, Any]:
    values: dict[str, Any] = {"status": new.value}
    if new is BatchStatus.IN_PROGRESS:
        values["in_progress_at"] = now
    elif new is BatchStatus.COMPLETED:
        # Results are read from the job rows, so finalizing takes no time of its own.
        values |= {"finalizing_at": now, "completed_at": now}
    elif new is BatchStatus.FAILED:
        values |= {
            "failed_at": now,
            "errors": [{"code": "invalid_file", "message": "no line of the input file is valid"}],
        }
    elif new is BatchStatus.EXPIRED:
        values["expired_at"] = now
    elif new is BatchStatus.CANCELLED:
        values["cancelled_at"] = now
    return values


def _result_files(
    sessions: sessionmaker[Session], batch: Batch, new: BatchStatus
) -> list[BatchFile]:
    """Output and error file rows for a batch that is ending (sizes measured once,
    read before the write that ends it, so no write lock is held meanwhile)."""
    ended = Batch(**{c.key: getattr(batch, c.key) for c in Batch.__table__.columns})
    ended.status = new.value
    files: list[BatchFile] = []
    with database_boundary("write the batch's result files"), sessions() as session:
        for purpose, lines in ((OUTPUT_PURPOSE, output_lines), (ERROR_PURPOSE, error_lines)):
            size = count = 0
            for text in lines(session, ended):
                size += len(text.encode()) + 1
                count += 1
            if count == 0:
                continue
            kind = "output" if purpose == OUTPUT_PURPOSE else "errors"
            files.append(
                BatchFile(
                    id=new_file_id(),
                    owner=batch.owner,
                    purpose=purpose,
                    filename=f"{batch.id}_{kind}.jsonl",
                    bytes=size,
                    lines=count,
                    batch_id=batch.id,
                    created_at=utcnow(),
                )
            )
    return files


def cancel_unfinished(
    sessions: sessionmaker[Session],
    batch: Batch,
    cancel_job: CancelJob | None,
    cancel_batch_jobs: CancelBatchJobs | None,
) -> None:
    """Cancel the batch's unfinished jobs: at once with ``cancel_batch_jobs`` (its jobs
    not linked yet too, by their lines' keys), else one by one with ``cancel_job``."""
    if cancel_batch_jobs is not None:
        stop = min(batch.total, batch.enqueued + UNLINKED_SPAN)
        keys = [line_key(batch.id, n) for n in range(batch.enqueued, stop)]
        cancel_batch_jobs(batch.id, scope=batch.owner or "", keys=keys)
        return
    if cancel_job is None:
        raise ValueError("cancel_job or cancel_batch_jobs is needed")
    for job_id in unfinished_jobs(sessions, batch.id):
        cancel_job(job_id)


def cancel_batch(
    sessions: sessionmaker[Session],
    batch_id: str,
    *,
    owner: str | None,
    cancel_job: CancelJob | None = None,
    cancel_batch_jobs: CancelBatchJobs | None = None,
) -> Batch:
    """Stop a batch: no more of its lines are sent, its unfinished jobs are cancelled
    (see :func:`cancel_unfinished`).

    It is ``cancelling`` until nothing of it runs, then ``cancelled``. A batch that
    already ended is returned as it is. Raises ``NotFound``.
    """
    batch = get_batch(sessions, batch_id, owner=owner)
    if BatchStatus(batch.status) in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS):
        with database_boundary("cancel the batch"), sessions.begin() as session:
            session.execute(
                update(Batch)
                .where(Batch.id == batch.id, Batch.status.in_([s.value for s in ACTIVE[:2]]))
                .values(status=BatchStatus.CANCELLING.value, cancelling_at=utcnow())
            )
    # Read again: the cancel reaches the lines being sent now, not those of its first read.
    batch = get_batch(sessions, batch.id, owner=None)
    cancel_unfinished(sessions, batch, cancel_job, cancel_batch_jobs)
    return refresh_batch(
        sessions, batch.id, cancel_job=cancel_job, cancel_batch_jobs=cancel_batch_jobs
    )
