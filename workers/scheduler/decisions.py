"""What the scheduler tells its drivers to do: the decisions it hands out.

Each is a plain value; a driver carries it out (a job thread waits, the Celery
consumer stops reading a queue, running batch jobs are halted, a job's message is
sent again). The scheduler never does any of it itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from schemas.queues import Priority
from workers.scheduler.slo_share import ShareChange


@dataclass(frozen=True)
class Run:
    """Go now. ``ticket``: what the job holds until its first token, where it holds one
    (give it back with the scheduler's matching event)."""

    ticket: int | None = None


class HoldReason(StrEnum):
    """Why a batch job's start waits."""

    FIRST_TOKEN = "an interactive request waits for its first token"
    PREFILL_FULL = "batch prefill places are full"


@dataclass(frozen=True)
class Hold:
    """Not yet: ask again after the next release, or at ``until`` (on the scheduler's
    clock) at the latest, when the answer may change without one."""

    until: float
    reason: HoldReason


@dataclass(frozen=True)
class GiveWay:
    """Halt the running batch jobs beyond the ``keep`` that started first and put them
    back in their queue (``workers.scheduler.give_way``); then report which were halted
    (``Scheduler.batch_halted``). ``cut``: the change of batch's share that asked for it
    (None when an interactive message did)."""

    keep: int
    cut: ShareChange | None = None


@dataclass(frozen=True)
class ReadQueues:
    """Stop reading the queues of ``pause`` and read those of ``resume`` again."""

    pause: frozenset[Priority] = field(default_factory=frozenset)
    resume: frozenset[Priority] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.pause or self.resume)


@dataclass(frozen=True)
class Requeue:
    """Send the job back to the front of its queue, on the same attempt (no step toward
    its dead-letter)."""

    job_id: str
