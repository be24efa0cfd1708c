"""The jobs a worker is generating right now, and the cancel requests that stop them."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum

import redis

from schemas.queues import CANCEL_CHANNEL, Priority, cancel_key
from workers.background import BackgroundLoop
from workers.scheduler.give_way import giving_way

log = logging.getLogger(__name__)

# Not a setting: a fallback for a cancel whose pub/sub message was missed; the message
# itself stops the job at once.
LOOK_FOR_KEYS_S = 1.0


class StopReason(StrEnum):
    """Why a job's generation was stopped before the engine finished it."""

    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    YIELDED = "yielded"
    """A batch job gave its engine place to interactive work; it goes back to its queue."""


@dataclass
class RunningJob:
    """One job in generation: ``stop`` aborts it in the engine, ``reason`` says why."""

    stop: threading.Event = field(default_factory=threading.Event)
    reason: StopReason | None = None
    priority: str = ""
    started: float = field(default_factory=time.monotonic)
    _timer: threading.Timer | None = None

    def halt(self, reason: StopReason) -> None:
        """Stop the generation (the first reason given is the one kept)."""
        if self.reason is None:
            self.reason = reason
        self.stop.set()

    def stop_at(self, delay_s: float) -> None:
        """Halt with reason ``deadline`` after ``delay_s`` seconds."""
        self._timer = threading.Timer(max(0.0, delay_s), self.halt, args=(StopReason.DEADLINE,))
        self._timer.daemon = True
        self._timer.start()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class RunningJobs:
    """Thread-safe map of job id to :class:`RunningJob` for one worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, RunningJob] = {}

    def start(
        self, job_id: str, job: RunningJob | None = None, *, priority: str = ""
    ) -> RunningJob:
        """Track ``job_id`` (as ``job``, when its generation already holds one)."""
        job = job if job is not None else RunningJob()
        job.priority = priority
        with self._lock:
            self._jobs[job_id] = job
        return job

    def finish(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None:
            job.close()

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def cancel(self, job_id: str) -> bool:
        """Halt ``job_id`` if it runs here; True if it did."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            return False
        job.halt(StopReason.CANCELLED)
        return True

    def yield_batch(self, keep: int) -> list[str]:
        """Halt the batch jobs beyond the ``keep`` that started first (the choice is the
        scheduler's: ``workers.scheduler.giving_way``); return their ids."""
        with self._lock:
            batch = {
                job_id: job
                for job_id, job in self._jobs.items()
                if job.priority == Priority.BATCH.value and job.reason is None
            }
        halted = giving_way(((job.started, job_id) for job_id, job in batch.items()), keep)
        for job_id in halted:
            batch[job_id].halt(StopReason.YIELDED)
        return halted


class CancelListener(BackgroundLoop):
    """Follows the cancel channel and halts named jobs that run in this worker.

    Pub/sub misses what is published while a subscriber is away (a Redis restart, or
    a job cancelled before this worker took it), so every second it also looks for
    the cancel keys of the jobs it runs: a cancel is never lost for long.
    """

    thread_name = "llmq-cancel"

    def __init__(self, client: redis.Redis, running: RunningJobs) -> None:
        super().__init__()
        self._redis = client
        self._running = running

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._follow()
            except redis.RedisError as exc:
                log.warning("cancel channel lost (%s); reconnecting", exc.__class__.__name__)
                time.sleep(1.0)

    def _follow(self) -> None:
        with self._redis.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call, unused-ignore]
            pubsub.subscribe(CANCEL_CHANNEL)
            next_look = time.monotonic()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=max(0.0, next_look - time.monotonic()))
                if time.monotonic() >= next_look:
                    self._look_for_keys()
                    next_look = time.monotonic() + LOOK_FOR_KEYS_S
                if message is not None and message.get("type") == "message":
                    self._cancel(message["data"])

    def _cancel(self, data: bytes | str) -> None:
        job_id = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        if self._running.cancel(job_id):
            log.info("job %s cancelled by its client", job_id)

    def _look_for_keys(self) -> None:
        running = self._running.ids()
        if not running:
            return
        pipe = self._redis.pipeline(transaction=False)
        for job_id in running:
            pipe.exists(cancel_key(job_id))
        for job_id, cancelled in zip(running, pipe.execute(), strict=True):
            if cancelled:
                self._cancel(job_id)
