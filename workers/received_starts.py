"""Engine requests started as their job's message is read, until the task takes them.

Between reading a message and running its task in a job thread, Celery does work of
its own (building its request, its strategy, the pool's hand-over, the task's
tracing). An interactive job's engine request is started the moment the transport
reads the message instead, on the consumer thread (``workers.app.start_on_receipt_of``,
on ``workers.transport.job_message_received``); the job's task takes it from here and
claims the row as ``workers.early_start`` describes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from schemas.requests import GenerationRequest
from workers.engine.base import DeltaStream
from workers.jobs import ClaimedJob
from workers.running_jobs import RunningJob
from workers.scheduler_driver import Ticket


@dataclass(frozen=True)
class JobHint:
    """What a job's message says of it: its request and priority, as the producer sent."""

    request: Mapping[str, object]
    priority: str


@dataclass
class EarlyStart:
    """A job's engine request, started before its claim (``workers.early_start``)."""

    hint: JobHint
    request: GenerationRequest
    prompt_ids: list[int]
    running: RunningJob
    deltas: DeltaStream
    started_at: float
    """``time.monotonic()`` as the worker began rendering the prompt."""
    ticket: Ticket | None = None
    """Held until the first token, so no batch prefill joins this one's step."""

    def matches(self, claimed: ClaimedJob) -> bool:
        """True when the claimed row is the job this request was started for, fresh."""
        return (
            claimed.attempt == 1
            and claimed.priority == self.hint.priority
            and claimed.request == dict(self.hint.request)
        )

    def abort(self) -> None:
        """Abort the engine request (nothing of it was published)."""
        self.running.close()
        self.deltas.close()
        if self.ticket is not None:
            self.ticket.give_back()


class Abortable(Protocol):
    def abort(self) -> None: ...


Started = TypeVar("Started", bound=Abortable)

# Not a setting: a safety net for a message Celery dropped; nothing waits on it.
# A request no task took this long after its message arrived never will be (Celery
# dropped the message: it expired, say): it is aborted, so it stops holding a slot.
UNTAKEN_AFTER_S = 30.0


class ReceivedStarts(Generic[Started]):
    """Started requests by job id; a duplicate message of a job has its own entry."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[str, list[tuple[float, Started]]] = {}

    def put(self, job_id: str, started: Started) -> None:
        """Keep ``started`` for the task of ``job_id``; abort what no task took."""
        now = self._clock()
        with self._lock:
            self._waiting.setdefault(job_id, []).append((now, started))
            untaken = self._drop_untaken(now)
        for request in untaken:
            request.abort()

    def take(self, job_id: str) -> Started | None:
        """The request started for ``job_id``'s message, oldest first; None if none."""
        with self._lock:
            entries = self._waiting.get(job_id)
            if not entries:
                return None
            _received_at, started = entries.pop(0)
            if not entries:
                del self._waiting[job_id]
            return started

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._waiting.values())

    def _drop_untaken(self, now: float) -> list[Started]:
        untaken: list[Started] = []
        for job_id, entries in list(self._waiting.items()):
            kept = [(at, started) for at, started in entries if now - at < UNTAKEN_AFTER_S]
            untaken += [started for at, started in entries if now - at >= UNTAKEN_AFTER_S]
            if kept:
                self._waiting[job_id] = kept
            else:
                del self._waiting[job_id]
        return untaken
