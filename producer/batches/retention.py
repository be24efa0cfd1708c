"""Batch files past their retention (``LLMQ_FILE_RETENTION_DAYS``) are deleted."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.store import NotFound, delete_file
from schemas.boundary import database_boundary
from schemas.errors import InUse
from schemas.tables import BatchFile, utcnow

# Files one retention pass deletes at most: a long backlog goes over several sweeps.
EXPIRE_CHUNK = 100


def expire_files(
    sessions: sessionmaker[Session], *, retention_days: float, now: datetime | None = None
) -> int:
    """Delete up to ``EXPIRE_CHUNK`` files, oldest first, created more than
    ``retention_days`` ago (every owner's); return how many went. A file that an
    unfinished batch still reads is kept until that batch ends. Raises
    ``DatabaseUnavailable``.
    """
    before = (now or utcnow()) - timedelta(days=retention_days)
    with database_boundary("find expired files"), sessions() as session:
        expired = list(
            session.scalars(
                select(BatchFile.id)
                .where(BatchFile.created_at < before)
                .order_by(BatchFile.created_at)
                .limit(EXPIRE_CHUNK)
            )
        )
    deleted = 0
    for file_id in expired:
        try:
            delete_file(sessions, file_id, owner=None)
        except (NotFound, InUse):
            continue  # gone meanwhile, or read by a batch still running: a later pass
        deleted += 1
    return deleted
