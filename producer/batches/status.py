"""A batch's status, computed from what its lines' jobs have become."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from schemas.errors import InvalidRequest


class BatchStatus(StrEnum):
    """OpenAI's batch statuses; the last four are final."""

    VALIDATING = "validating"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in FINAL


FINAL = frozenset(
    {BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}
)
ACTIVE = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.CANCELLING)

MAX_WINDOW = timedelta(days=7)
_WINDOW = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(window: str) -> timedelta:
    """``24h`` (OpenAI's one value), or any ``<n>s|m|h|d`` up to 7 days.

    Raises ``InvalidRequest`` for anything else.
    """
    match = _WINDOW.match(window)
    if match is None:
        raise InvalidRequest(f"completion_window must look like 24h, not {window!r}")
    span = timedelta(seconds=int(match.group(1)) * _UNIT_S[match.group(2)])
    if span > MAX_WINDOW:
        raise InvalidRequest("completion_window may be at most 7d")
    return span


@dataclass(frozen=True)
class Tally:
    """Where a batch's lines are.

    ``handled`` lines were enqueued as jobs or recorded as errors; ``invalid`` of them
    became no job; ``done``, ``ended`` (final but not done) and ``unfinished``
    (queued or running) count the jobs.
    """

    total: int
    handled: int
    invalid: int
    done: int
    ended: int
    unfinished: int

    @property
    def failed(self) -> int:
        """Lines with an error: invalid ones and jobs that ended without an answer."""
        return self.invalid + self.ended

    @property
    def all_answered(self) -> bool:
        return self.handled >= self.total and self.unfinished == 0


def next_status(
    status: BatchStatus,
    tally: Tally,
    *,
    now: datetime,
    expires_at: datetime,
    enqueuing: bool,
) -> BatchStatus:
    """The status a batch moves to, given its lines' state (final statuses stay).

    A running batch past its window expires (its unfinished lines are then cancelled);
    one whose every line has a result completes, or fails when no line was valid; a
    cancelling batch is cancelled once nothing of it runs and no enqueuer holds it.
    """
    new = status
    if status is BatchStatus.CANCELLING:
        if tally.unfinished == 0 and not enqueuing:
            new = BatchStatus.CANCELLED
    elif status.is_final:
        pass
    elif now >= expires_at:
        new = BatchStatus.EXPIRED
    elif tally.all_answered:
        every_line_invalid = tally.total > 0 and tally.invalid == tally.total
        new = BatchStatus.FAILED if every_line_invalid else BatchStatus.COMPLETED
    elif status is BatchStatus.VALIDATING and tally.handled > 0:
        new = BatchStatus.IN_PROGRESS
    return new
