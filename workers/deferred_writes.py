"""A job's end that outlived a database outage, written once the database is back.

A job's end (done, failed, back to its queue) is written with quick retries first
(``workers.jobs.with_db_retry``, about a minute in all). Should the database stay
away longer, the write is not dropped: it waits here and is tried again every
``settings.timeouts.deferred_write_retry_s`` for as long as the worker lives.
Dropped, it would leave the row ``running`` under a live worker until the reaper
found that worker no longer holds the job (``workers.held_jobs``, half a minute) and
sent it again; once the database is back, a held write lands well before that.
Should this worker die first, its rows are a dead worker's, and the reaper recovers them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.background import BackgroundLoop

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = DEFAULT_TIMEOUTS.deferred_write_retry_s
"""The default of ``settings.timeouts.deferred_write_retry_s``, for writes held without settings."""

Write = Callable[[], bool]
"""A conditional row write: True when it landed, False when the row had moved on."""
Then = Callable[[bool], None]
"""Told the write's result once it ran (to send a job's message again, say)."""


@dataclass(frozen=True)
class _Pending:
    what: str
    write: Write
    then: Then | None


class DeferredWrites(BackgroundLoop):
    """Holds writes the database refused and retries them until each one runs."""

    thread_name = "llmq-deferred-writes"

    def __init__(self, *, interval_s: float = RETRY_INTERVAL_S) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []

    def add(self, what: str, write: Write, *, then: Then | None = None) -> None:
        """Keep ``write`` (described by ``what``) for the next retry."""
        with self._lock:
            self._pending.append(_Pending(what, write, then))
        log.warning("will %s once the database is back", what)

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Try every held write once; return how many the database still refuses."""
        with self._lock:
            due, self._pending = self._pending, []
        refused = [pending for pending in due if not self._ran(pending)]
        with self._lock:
            self._pending[:0] = refused  # oldest first, before any added meanwhile
            return len(self._pending)

    def run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self.flush()
            except Exception:
                log.exception("retrying the held job writes failed")

    def _ran(self, pending: _Pending) -> bool:
        try:
            result = pending.write()
        except SQLAlchemyError as exc:
            log.debug("could not yet %s (%s)", pending.what, exc.__class__.__name__)
            return False
        log.info("did %s now that the database is back", pending.what)
        if pending.then is not None:
            try:
                pending.then(result)
            except Exception:
                log.exception("after %s", pending.what)
        return True
