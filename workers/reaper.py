"""Recovering work that a dead worker or a restarted Redis left behind.

Each worker runs a reaper thread. It looks after every tier, not only its own, so a
tier whose workers all died still has its work put back for when one returns. What
is recovered:

* **Messages of dead workers.** Every message a worker took off a queue and did not
  acknowledge (claimed or not yet) is recorded under its id (``workers.transport``).
  When the worker has been missing from the registry for ``reaper_missing_grace_s``
  (``settings.timeouts``, as are the other waits named here), those
  messages go back to the front of their queues, within seconds rather than after
  Celery's visibility timeout, which stays as the last backstop.
* **Jobs of dead workers.** A running row whose worker is missing the same way goes
  back to ``queued`` and its message is sent again, so another worker resumes it;
  after ``max_attempts`` it is dead-lettered instead, so a job that kills its worker
  cannot loop. A copy of a message that arrives twice claims nothing.
* **Jobs a live worker lost track of.** A running row whose worker is alive but has
  not held the job (``held_jobs`` in its heartbeat, ``workers.held_jobs``) for
  ``reaper_unheld_grace_s`` is recovered the same way: its task ended without its end being
  written (a write the database kept refusing, a bug). A worker too old to report
  what it holds is left alone.
* **Queued jobs past their deadline** end ``expired`` without running.
* **Queues a Redis restart emptied.** Redis without persistence forgets its lists.
  A marker key without expiry tells: when it is gone, the first worker of the tier to
  notice sets it again and sends every queued job of the tier again; a duplicate
  message of a job claims nothing, so this is always safe.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from sqlalchemy import select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from schemas.db_clock import db_now
from schemas.jobs import EXPIRED_MESSAGE, JobStatus
from schemas.queues import (
    KNOWN_WORKERS_KEY,
    LOST_MESSAGE_SWEEP_LOCK_KEY,
    Priority,
    Tier,
    queues_kept_key,
    worker_key,
)
from schemas.tables import Job
from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.background import BackgroundLoop
from workers.publisher import StreamPublisher

log = logging.getLogger(__name__)

# The defaults of ``settings.timeouts``' reaper fields (schemas.timeouts), for a reaper
# built without settings. The missing grace is longer than a few missed heartbeats, so a
# Redis restart (which drops every registry entry until the next heartbeat) does not
# look like dead workers. A queued job older than the lost-message age with no message
# anywhere lost it: the periodic sweep sends it again (a worker's death triggers the
# sweep at once). The unheld grace spans many heartbeats (a job claimed just now is in
# its worker's next one) and is longer than a deferred write's retry
# (workers.deferred_writes), which lands first once the database is back.
REAP_INTERVAL_S = DEFAULT_TIMEOUTS.reaper_interval_s
MISSING_GRACE_S = DEFAULT_TIMEOUTS.reaper_missing_grace_s
LOST_MESSAGE_AGE_S = DEFAULT_TIMEOUTS.lost_message_age_s
SWEEP_INTERVAL_S = DEFAULT_TIMEOUTS.lost_message_sweep_s
UNHELD_GRACE_S = DEFAULT_TIMEOUTS.reaper_unheld_grace_s

SendJob = Callable[[str, Tier, Priority], None]
FindMessages = Callable[[], set[str]]
"""Ids of the jobs whose message is on a queue or held by a worker."""
RestoreHeld = Callable[[str], int]
"""Puts a dead worker's unacknowledged messages back on their queues; returns how many."""


def _restore_nothing(_worker_id: str) -> int:
    return 0


@dataclass(frozen=True)
class RunningRow:
    """A running job as the reaper sees it."""

    id: str
    worker_id: str
    attempts: int
    tier: Tier
    priority: Priority


@dataclass
class Reaper:
    """Finds and recovers orphaned work of every tier; ``run_once`` is one pass."""

    sessions: sessionmaker[Session]
    redis: redis.Redis
    send: SendJob
    max_attempts: int
    replay_ttl_s: int
    restore_held: RestoreHeld = _restore_nothing
    messages_in_broker: FindMessages | None = None
    grace_s: float = MISSING_GRACE_S
    unheld_grace_s: float = UNHELD_GRACE_S
    sweep_interval_s: float = SWEEP_INTERVAL_S
    lost_message_age_s: float = LOST_MESSAGE_AGE_S
    variants: tuple[Tier, ...] = ()
    """Configured variants, whose queues are looked after like the base tiers'."""
    _missing_since: dict[str, float] = field(default_factory=dict)
    _unheld_since: dict[tuple[str, str, int], float] = field(default_factory=dict)

    def run_once(self) -> int:
        """Recover what can be recovered now; return how many messages were put back."""
        self._expire_overdue()
        return self._reconcile_after_restart() + self._recover_dead_workers()

    def _recover_dead_workers(self) -> int:
        rows = running_rows(self.sessions)
        known = {_text(member) for member in self.redis.smembers(KNOWN_WORKERS_KEY)}
        dead = self._dead_workers(known | {row.worker_id for row in rows}, now=time.monotonic())
        recovered = 0
        for worker_id in sorted(dead & known):
            restored = self.restore_held(worker_id)
            if restored:
                log.warning("worker %s died holding %d message(s); requeued", worker_id, restored)
            recovered += restored
        for row in rows:
            if row.worker_id in dead:
                recovered += self._recover(row)
        live = [row for row in rows if row.worker_id not in dead]
        recovered += self._recover_unheld(live, now=time.monotonic())
        # A worker can die between popping a message and recording it; nothing but a
        # look at every queued job finds that message's job again.
        recovered += self._resend_lost_messages(now_due=bool(dead))
        if dead:
            self.redis.srem(KNOWN_WORKERS_KEY, *sorted(dead))
        return recovered

    def _resend_lost_messages(self, *, now_due: bool) -> int:
        """Send again every queued job that has no message on a queue or with a worker.

        Runs when a worker died and, by one reaper at a time, every ``sweep_interval_s``.
        A job whose message turns up after all runs once anyway (the claim).
        """
        if self.messages_in_broker is None:
            return 0
        periodic = self.redis.set(
            LOST_MESSAGE_SWEEP_LOCK_KEY, "1", nx=True, ex=int(self.sweep_interval_s)
        )
        if not (now_due or periodic):
            return 0
        queued = queued_rows_before(
            self.sessions, age_s=1.0 if now_due else self.lost_message_age_s
        )
        if not queued:
            return 0
        present = self.messages_in_broker()
        lost = [job for job in queued if job[0] not in present]
        for job_id, tier, priority in lost:
            log.warning("job %s had no message left anywhere; sending it again", job_id)
            self.send(job_id, tier, priority)
        return len(lost)

    def _expire_overdue(self) -> None:
        for job_id in expire_overdue_jobs(self.sessions):
            log.warning("job %s expired in its queue: its deadline passed", job_id)
            publisher = StreamPublisher(self.redis, job_id, ttl_s=self.replay_ttl_s)
            publisher.adopt()
            publisher.error(EXPIRED_MESSAGE, JobStatus.EXPIRED)

    def _dead_workers(self, worker_ids: set[str], *, now: float) -> set[str]:
        """Workers missing from the registry for at least ``grace_s``."""
        ordered = sorted(worker_ids)
        pipe = self.redis.pipeline(transaction=False)
        for worker_id in ordered:
            pipe.exists(worker_key(worker_id))
        alive = dict(zip(ordered, pipe.execute(), strict=True))
        for worker_id in list(self._missing_since):
            if worker_id not in worker_ids or alive.get(worker_id):
                del self._missing_since[worker_id]
        dead = set()
        for worker_id, present in alive.items():
            if present:
                continue
            first_missed = self._missing_since.setdefault(worker_id, now)
            if now - first_missed >= self.grace_s:
                dead.add(worker_id)
        return dead

    def _recover_unheld(self, rows: list[RunningRow], *, now: float) -> int:
        """Recover the rows of live workers that have not held them for ``unheld_grace_s``."""
        held = self._held_jobs(sorted({row.worker_id for row in rows}))
        unheld: dict[tuple[str, str, int], float] = {}
        recovered = 0
        for row in rows:
            ids = held.get(row.worker_id)
            if ids is None or row.id in ids:
                continue
            key = (row.id, row.worker_id, row.attempts)
            since = unheld[key] = self._unheld_since.get(key, now)
            if now - since >= self.unheld_grace_s:
                recovered += self._recover(row, lost=True)
        self._unheld_since = unheld
        return recovered

    def _held_jobs(self, worker_ids: list[str]) -> dict[str, set[str]]:
        """What each worker's last heartbeat says it holds; absent when it does not say."""
        if not worker_ids:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for worker_id in worker_ids:
            pipe.hget(worker_key(worker_id), "held_jobs")
        found = {}
        for worker_id, raw in zip(worker_ids, pipe.execute(), strict=True):
            try:
                ids = json.loads(raw) if raw is not None else None
            except ValueError:
                continue
            if isinstance(ids, list):
                found[worker_id] = {str(job_id) for job_id in ids}
        return found

    def _recover(self, row: RunningRow, *, lost: bool = False) -> int:
        """Send a running job of a dead worker (``lost``: of a live worker that no longer
        holds it) again, or dead-letter it after ``max_attempts``."""
        if row.attempts >= self.max_attempts:
            message = (
                f"dead-lettered: its worker lost track of it on the last of its {row.attempts} "
                "attempts"
                if lost
                else f"dead-lettered: its worker died during each of its {row.attempts} attempts"
            )
            if release_job(self.sessions, row, JobStatus.DEAD_LETTER, error=message):
                log.error("job %s %s", row.id, message)
                publisher = StreamPublisher(self.redis, row.id, ttl_s=self.replay_ttl_s)
                publisher.adopt()
                publisher.error(message, JobStatus.DEAD_LETTER)
            return 0
        if not release_job(self.sessions, row, JobStatus.QUEUED):
            return 0  # its worker came back and finished it, or another reaper won
        what = "no longer holds" if lost else "died running"
        log.warning("worker %s %s job %s; sending it again", row.worker_id, what, row.id)
        try:
            self.send(row.id, row.tier, row.priority)
        except Exception:
            # Put the row back as it was, so the next pass tries again.
            restore_running(self.sessions, row)
            raise
        return 1

    def _reconcile_after_restart(self) -> int:
        return sum(self._reconcile_tier(tier) for tier in [*Tier, *self.variants, Tier.EMBED])

    def _reconcile_tier(self, tier: Tier) -> int:
        # The marker has no TTL: it is missing only when Redis lost its data (or is
        # new), and then the queues went with it.
        marker = queues_kept_key(tier)
        if not self.redis.set(marker, "1", nx=True):
            return 0
        try:
            queued = queued_rows(self.sessions, tier)
            for job_id, priority in queued:
                self.send(job_id, tier, priority)
        except Exception:
            self.redis.delete(marker)  # let the next pass (or another worker) do it all
            raise
        if queued:
            log.warning("Redis lost its queues; sent %d queued %s jobs again", len(queued), tier)
        return len(queued)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def running_rows(sessions: sessionmaker[Session]) -> list[RunningRow]:
    """Every running job, whatever its tier."""
    query = select(Job.id, Job.worker_id, Job.attempts, Job.tier, Job.priority).where(
        Job.status == JobStatus.RUNNING.value
    )
    with sessions() as session:
        return [
            RunningRow(
                row.id, row.worker_id or "", row.attempts, Tier(row.tier), Priority(row.priority)
            )
            for row in session.execute(query)
        ]


def expire_overdue_jobs(sessions: sessionmaker[Session]) -> list[str]:
    """End every queued job whose deadline has passed ``expired``; return their ids.

    The deadline is compared with the database's clock, so the reaper's host clock
    plays no part.
    """
    expire = (
        update(Job)
        .where(
            Job.status == JobStatus.QUEUED.value,
            Job.deadline_at.is_not(None),
            Job.deadline_at < db_now(),
        )
        .values(status=JobStatus.EXPIRED.value, error=EXPIRED_MESSAGE, finished_at=db_now())
        .returning(Job.id)
    )
    with sessions.begin() as session:
        return [row.id for row in session.execute(expire)]


def queued_rows(sessions: sessionmaker[Session], tier: Tier) -> list[tuple[str, Priority]]:
    """Every queued job of ``tier``, oldest first."""
    query = (
        select(Job.id, Job.priority)
        .where(Job.status == JobStatus.QUEUED.value, Job.tier == tier.value)
        .order_by(Job.created_at)
    )
    with sessions() as session:
        return [(row.id, Priority(row.priority)) for row in session.execute(query)]


def queued_rows_before(
    sessions: sessionmaker[Session], *, age_s: float
) -> list[tuple[str, Tier, Priority]]:
    """Every queued job, of any tier, created at least ``age_s`` seconds ago."""
    cutoff = db_now(-age_s)
    query = select(Job.id, Job.tier, Job.priority).where(
        Job.status == JobStatus.QUEUED.value, Job.created_at <= cutoff
    )
    with sessions() as session:
        return [(row.id, Tier(row.tier), Priority(row.priority)) for row in session.execute(query)]


def release_job(
    sessions: sessionmaker[Session],
    row: RunningRow,
    status: JobStatus,
    *,
    error: str | None = None,
) -> bool:
    """Move a running job its worker lost (died, or no longer holds it) to ``status``;
    False if the row changed meanwhile."""
    values: dict[str, object] = {"status": status.value}
    if status.is_final:
        values |= {"error": error, "finished_at": db_now()}
    release = (
        update(Job)
        .where(
            Job.id == row.id,
            Job.status == JobStatus.RUNNING.value,
            Job.worker_id == row.worker_id,
            Job.attempts == row.attempts,
        )
        .values(**values)
        .returning(Job.id)
    )
    with sessions.begin() as session:
        return session.execute(release).first() is not None


def restore_running(sessions: sessionmaker[Session], row: RunningRow) -> None:
    """Undo :func:`release_job` to ``queued`` when the message could not be sent."""
    restore = (
        update(Job)
        .where(Job.id == row.id, Job.status == JobStatus.QUEUED.value)
        .values(status=JobStatus.RUNNING.value)
    )
    with sessions.begin() as session:
        session.execute(restore)


class ReaperThread(BackgroundLoop):
    """Runs a :class:`Reaper` every ``interval_s`` until stopped; errors are logged."""

    thread_name = "llmq-reaper"

    def __init__(self, reaper: Reaper, *, interval_s: float = REAP_INTERVAL_S) -> None:
        super().__init__()
        self._reaper = reaper
        self._interval_s = interval_s

    def run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self._reaper.run_once()
            except (redis.RedisError, SQLAlchemyError) as exc:
                log.warning("reaper pass failed (%s); retrying", exc.__class__.__name__)
            except Exception:
                log.exception("reaper pass failed")
