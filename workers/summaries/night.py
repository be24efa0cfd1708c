"""One night's summaries: which conversations, and driving each summary to its end.

Every conversation with turns on the night's day gets one summary of that day's turns.
Each step is an ordinary batch-priority job submitted through the producer's client
(so it waits for capacity interactive work leaves, and survives worker deaths like
any job); the runner polls the job rows and moves each summary on:

* a day that fits one step's budget: one ``final`` job;
* a longer one (map-reduce): the transcript is cut on turn boundaries into chunks
  that fit (``map1``), each summarized; the partial summaries are then summarized
  together (``final``), or chunked again (``map2`` ...) if they still do not fit.

A failed step job is sent again, up to ``summary_max_attempts`` in all; then the
summary is recorded ``failed`` with the job's reason.

**Idempotency, and which guard covers what.**

* The unique constraint on ``summaries (owner, conversation_id, day)`` is what makes
  a duplicate summary impossible: rows are created with insert-or-ignore, so a night
  run twice, or by two runners at once, finds the one row there is.
* The per-night Redis lock (:class:`~workers.summaries.lock.NightLock`) lets one
  runner work a night at a time, so two beats do not both submit and poll; it is an
  efficiency guard, not the correctness one: it lapses if its holder dies.
* Step jobs carry idempotency keys derived from (owner, conversation, day, step,
  chunk, attempt), and a summary row moves on only with a conditional update on its
  (stage, attempts): a runner that lost its lock mid-step neither sends a step twice
  nor counts its tokens twice.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_start
from enum import StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from producer.client import Client
from schemas.boundary import database_boundary
from schemas.errors import BrokerUnavailable, InvalidRequest, QueueFull
from schemas.jobs import JobStatus
from schemas.prompt_registry import PromptCatalog
from schemas.queues import Priority
from schemas.settings import Settings
from schemas.tables import Job, Summary, Turn, utcnow
from workers.summaries.chunking import (
    PARTIAL_SEPARATOR,
    TURN_SEPARATOR,
    chunk_pieces,
    render_turn,
    step_budget,
)
from workers.summaries.lock import NightLock

log = logging.getLogger(__name__)

SUMMARY_OWNER = "llmq-summaries"
"""Owner of summary jobs: not a tenant's key, so they never count against its limits."""

MAX_LEVELS = 6
"""Map rounds before a summary that does not shrink is given up."""

PENDING, DONE, FAILED = "pending", "done", "failed"


class Action(StrEnum):
    """What a night does with one conversation."""

    NEW = "new"  # no summary yet: create it
    RESUME = "resume"  # a summary an earlier run left pending: carry it on
    SKIP = "skip"  # already done or failed: leave it


@dataclass(frozen=True)
class Candidate:
    """A conversation with turns on the night's day."""

    owner: str
    conversation_id: str
    turns: int


@dataclass
class NightReport:
    """How a night ended: the record ``llmq summarize`` prints and the beat task logs."""

    day: date
    done: int = 0
    failed: int = 0
    skipped: int = 0
    remaining: int = 0
    held_elsewhere: bool = False
    seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped + self.remaining


@dataclass(frozen=True)
class Progress:
    """Counts while a night runs, for a progress display."""

    done: int
    failed: int
    remaining: int
    elapsed_s: float


def day_window(day: date, timezone: str) -> tuple[datetime, datetime]:
    """The UTC start and end of ``day`` as the time zone ``timezone`` has it."""
    zone = ZoneInfo(timezone)
    start = datetime.combine(day, day_start(), tzinfo=zone)
    end = datetime.combine(day + timedelta(days=1), day_start(), tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


def previous_day(now: datetime, timezone: str) -> date:
    """Yesterday, in ``timezone``, as of ``now``: the day a nightly run summarizes."""
    return now.astimezone(ZoneInfo(timezone)).date() - timedelta(days=1)


def plan_night(
    candidates: Sequence[Candidate], existing: Mapping[tuple[str, str], str]
) -> list[tuple[Candidate, Action]]:
    """What to do with each candidate, given the statuses of the night's existing rows."""
    plan = []
    for candidate in candidates:
        status = existing.get((candidate.owner, candidate.conversation_id))
        if status is None:
            action = Action.NEW
        elif status == PENDING:
            action = Action.RESUME
        else:
            action = Action.SKIP
        plan.append((candidate, action))
    return plan


def step_key(
    owner: str, conversation_id: str, day: date, *, stage: str, index: int, attempt: int
) -> str:
    """The idempotency key of one step job: the same step sent twice is one job."""
    digest = hashlib.sha256(f"{owner}\0{conversation_id}\0{day}".encode()).hexdigest()[:32]
    return f"summary:{digest}:{day}:{stage}:{index}:{attempt}"


class NightRunner:
    """Runs nights of summaries through a producer client. Plain code; no Celery."""

    def __init__(self, settings: Settings, client: Client, *, poll_s: float = 0.5) -> None:
        self.settings = settings
        self.client = client
        self.poll_s = poll_s
        self.tier = settings.summary_tier
        self._sessions: sessionmaker[Session] = client.sessions
        registry = PromptCatalog(settings.prompts_dir).registry
        prompt = registry.resolve(settings.summary_prompt, tier=self.tier)
        self.prompt_ref = prompt.ref
        self.count: Callable[[str], int] = lambda text: client.count_tokens(text, self.tier)
        context = settings.summary_context_tokens or settings.tier(self.tier).max_model_len
        try:
            self.budget = step_budget(
                context=context,
                max_tokens=settings.summary_max_tokens,
                prompt_tokens=self.count(prompt.text),
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None

    # -- the night's selection ------------------------------------------------------

    def candidates(self, day: date, *, conversation: str | None = None) -> list[Candidate]:
        """Conversations with turns on ``day`` (all owners'), sorted."""
        start, end = day_window(day, self.settings.summary_timezone)
        query = (
            select(Turn.owner, Turn.conversation_id, func.count())
            .where(Turn.created_at >= start, Turn.created_at < end)
            .group_by(Turn.owner, Turn.conversation_id)
            .order_by(Turn.owner, Turn.conversation_id)
        )
        if conversation is not None:
            query = query.where(Turn.conversation_id == conversation)
        with database_boundary("find the night's conversations"), self._sessions() as session:
            return [Candidate(owner, cid, count) for owner, cid, count in session.execute(query)]

    def plan(self, day: date, *, conversation: str | None = None) -> list[tuple[Candidate, Action]]:
        """Each of the night's conversations and what a run would do with it."""
        candidates = self.candidates(day, conversation=conversation)
        with database_boundary("read the night's summaries"), self._sessions() as session:
            rows = session.execute(
                select(Summary.owner, Summary.conversation_id, Summary.status).where(
                    Summary.day == day
                )
            )
            existing = {(owner, cid): status for owner, cid, status in rows}
        return plan_night(candidates, existing)

    def chunks_for(self, candidate: Candidate, day: date) -> int:
        """How many first-step jobs a conversation's day takes (1: no map-reduce)."""
        return len(self._chunks(self._transcript(candidate.owner, candidate.conversation_id, day)))

    # -- running a night ------------------------------------------------------------

    def run(
        self,
        day: date,
        *,
        conversation: str | None = None,
        on_held: Literal["wait", "skip"] = "wait",
        progress: Callable[[Progress], None] | None = None,
        timeout_s: float | None = None,
    ) -> NightReport:
        """Summarize every conversation of ``day`` and wait until each has ended.

        With the night held by another runner, ``on_held="skip"`` returns at once
        (``held_elsewhere``); ``"wait"`` waits for it, then finds its work done. After
        ``timeout_s`` the report counts what is still pending as ``remaining``; a later
        run resumes it. Raises ``DatabaseUnavailable``.
        """
        started = time.monotonic()
        lock = NightLock(self.client.redis, day)
        while not lock.acquire():
            if on_held == "skip":
                return NightReport(day=day, held_elsewhere=True)
            time.sleep(self.poll_s)
        try:
            return self._run_locked(
                day,
                conversation=conversation,
                lock=lock,
                progress=progress,
                timeout_s=timeout_s,
                started=started,
            )
        finally:
            lock.release()

    def _run_locked(
        self,
        day: date,
        *,
        conversation: str | None,
        lock: NightLock,
        progress: Callable[[Progress], None] | None,
        timeout_s: float | None,
        started: float,
    ) -> NightReport:
        plan = self.plan(day, conversation=conversation)
        report = NightReport(day=day, skipped=sum(a is Action.SKIP for _, a in plan))
        ids = [self._ensure_row(c, day) for c, action in plan if action is not Action.SKIP]
        statuses = {summary_id: PENDING for summary_id in ids}
        while True:
            for summary_id in [i for i, status in statuses.items() if status == PENDING]:
                statuses[summary_id] = self._advance_safely(summary_id, day)
            elapsed = time.monotonic() - started
            pending = sum(status == PENDING for status in statuses.values())
            if progress is not None:
                progress(
                    Progress(
                        done=sum(s == DONE for s in statuses.values()),
                        failed=sum(s == FAILED for s in statuses.values()),
                        remaining=pending,
                        elapsed_s=elapsed,
                    )
                )
            if not pending or (timeout_s is not None and elapsed > timeout_s):
                break
            if not lock.renew() and not lock.acquire():
                log.warning("the lock on %s lapsed and another runner holds it", day)
            time.sleep(self.poll_s)
        report.done = sum(s == DONE for s in statuses.values())
        report.failed = sum(s == FAILED for s in statuses.values())
        report.remaining = sum(s == PENDING for s in statuses.values())
        report.failures = self._failures(ids)
        report.seconds = time.monotonic() - started
        return report

    def _failures(self, ids: Sequence[int]) -> dict[str, str]:
        with self._sessions() as session:
            rows = session.execute(
                select(Summary.conversation_id, Summary.error).where(
                    Summary.id.in_(ids), Summary.status == FAILED
                )
            )
            return {cid: error or "" for cid, error in rows}

    def _ensure_row(self, candidate: Candidate, day: date) -> int:
        """The night's row for the conversation; inserted if missing, never duplicated."""
        values: dict[str, Any] = {
            "owner": candidate.owner,
            "conversation_id": candidate.conversation_id,
            "day": day,
            "status": PENDING,
            "tier": self.tier.value,
            "model": self.settings.tier(self.tier).model,
            "prompt_tokens": 0,
            "output_tokens": 0,
            "attempts": 0,
            "step_jobs": [],
            "created_at": utcnow(),
        }
        with database_boundary("record the night's summary"), self._sessions.begin() as session:
            dialect = session.get_bind().dialect.name
            insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
            session.execute(insert(Summary).values(**values).on_conflict_do_nothing())
            summary_id = session.scalar(
                select(Summary.id).where(
                    Summary.owner == candidate.owner,
                    Summary.conversation_id == candidate.conversation_id,
                    Summary.day == day,
                )
            )
        assert summary_id is not None
        return summary_id

    def _advance_safely(self, summary_id: int, day: date) -> str:
        try:
            return self.advance(summary_id, day)
        except (QueueFull, BrokerUnavailable) as exc:
            # The batch queue is full or Redis blinked: wait and send the step again
            # (its idempotency key makes a step that did go out the same job).
            log.info("summary %d waits: %s", summary_id, exc)
            return PENDING

    def advance(self, summary_id: int, day: date) -> str:
        """Move one summary on as far as its jobs allow; return its status after.

        Raises ``QueueFull`` or ``BrokerUnavailable`` when a step cannot be sent now.
        """
        with database_boundary("read a summary"), self._sessions() as session:
            row = session.get(Summary, summary_id)
            assert row is not None
            session.expunge(row)
            jobs = [session.get(Job, job_id) for job_id in row.step_jobs]
        if row.status != PENDING:
            return row.status
        if not row.step_jobs:
            pieces = self._transcript(row.owner, row.conversation_id, day)
            return self._send_step(row, day, level=1, pieces=pieces, merging=False)
        if any(job is None or not JobStatus(job.status).is_final for job in jobs):
            return PENDING
        finished = [job for job in jobs if job is not None]
        broken = [
            j for j in finished if j.status != JobStatus.DONE or not (j.output_text or "").strip()
        ]
        if broken:
            return self._retry(row, day, finished, broken)
        tokens = {
            "prompt_tokens": row.prompt_tokens + sum(j.prompt_tokens or 0 for j in finished),
            "output_tokens": row.output_tokens + sum(j.completion_tokens or 0 for j in finished),
        }
        outputs = [(job.output_text or "").strip() for job in finished]
        if row.stage == "final":
            moved = self._update(row, status=DONE, text=outputs[0], finished_at=utcnow(), **tokens)
            return DONE if moved else PENDING
        level = int((row.stage or "map1").removeprefix("map")) + 1
        return self._send_step(row, day, level=level, pieces=outputs, merging=True, **tokens)

    def _transcript(self, owner: str, conversation_id: str, day: date) -> list[str]:
        start, end = day_window(day, self.settings.summary_timezone)
        with database_boundary("read a conversation"), self._sessions() as session:
            turns = session.execute(
                select(Turn.role, Turn.content)
                .where(
                    Turn.owner == owner,
                    Turn.conversation_id == conversation_id,
                    Turn.created_at >= start,
                    Turn.created_at < end,
                )
                .order_by(Turn.seq)
            )
            return [render_turn(role, content) for role, content in turns]

    def _chunks(self, pieces: Sequence[str], *, merging: bool = False) -> list[str]:
        separator = PARTIAL_SEPARATOR if merging else TURN_SEPARATOR
        return chunk_pieces(pieces, budget=self.budget, count=self.count, separator=separator)

    def _send_step(
        self,
        row: Summary,
        day: date,
        *,
        level: int,
        pieces: Sequence[str],
        merging: bool,
        **tokens: int,
    ) -> str:
        chunks = self._chunks(pieces, merging=merging)
        stage = "final" if len(chunks) == 1 else f"map{level}"
        if level > MAX_LEVELS:
            error = f"the partial summaries did not shrink after {MAX_LEVELS} rounds"
            self._update(row, status=FAILED, error=error, finished_at=utcnow(), **tokens)
            return FAILED
        try:
            job_ids = [
                self._submit(
                    self._instruction(stage, merging, index, len(chunks)) + chunk,
                    step_key(
                        row.owner,
                        row.conversation_id,
                        day,
                        stage=stage,
                        index=index,
                        attempt=row.attempts,
                    ),
                )
                for index, chunk in enumerate(chunks)
            ]
        except InvalidRequest as exc:
            self._update(row, status=FAILED, error=str(exc), finished_at=utcnow(), **tokens)
            return FAILED
        self._update(row, stage=stage, step_jobs=job_ids, **tokens)
        return PENDING

    def _retry(
        self, row: Summary, day: date, finished: Sequence[Job], broken: Sequence[Job]
    ) -> str:
        attempts = row.attempts + 1
        first = broken[0]
        reason = first.error or (
            "an empty summary" if first.status == JobStatus.DONE else first.status
        )
        if attempts >= self.settings.summary_max_attempts:
            error = f"step {row.stage} failed {attempts} times; last: {reason}"
            moved = self._update(
                row, status=FAILED, attempts=attempts, error=error, finished_at=utcnow()
            )
            return FAILED if moved else PENDING
        log.info("summary %d step %s failed (%s); sending it again", row.id, row.stage, reason)
        broken_ids = {job.id for job in broken}
        job_ids = []
        for index, job in enumerate(finished):
            if job.id not in broken_ids:
                job_ids.append(job.id)
                continue
            key = step_key(
                row.owner,
                row.conversation_id,
                day,
                stage=row.stage or "",
                index=index,
                attempt=attempts,
            )
            job_ids.append(self._submit_request(job.request, key))
        self._update(row, attempts=attempts, error=reason, step_jobs=job_ids)
        return PENDING

    @staticmethod
    def _instruction(stage: str, merging: bool, index: int, total: int) -> str:
        if merging:
            what = "these summaries of consecutive parts of one conversation"
            return f"Merge {what} into one summary:\n\n"
        if stage == "final":
            return "Summarize this conversation:\n\n"
        return f"Summarize part {index + 1} of {total} of this conversation:\n\n"

    def _submit(self, text: str, key: str) -> str:
        request = {
            "system_prompt": self.prompt_ref,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": self.settings.summary_max_tokens,
            "temperature": 0.0,
        }
        return self._submit_request(request, key)

    def _submit_request(self, request: Mapping[str, Any], key: str) -> str:
        handle = self.client.submit(
            dict(request),
            tier=self.tier,
            priority=Priority.BATCH,
            idempotency_key=key,
            owner=SUMMARY_OWNER,
        )
        return handle.job_id

    def _update(self, row: Summary, **values: Any) -> bool:
        """Write ``values`` if the row is still where this runner read it; True if so."""
        stage_is = Summary.stage.is_(None) if row.stage is None else Summary.stage == row.stage
        with database_boundary("record a summary's progress"), self._sessions.begin() as session:
            updated = session.execute(
                update(Summary)
                .where(
                    Summary.id == row.id,
                    Summary.status == PENDING,
                    Summary.attempts == row.attempts,
                    stage_is,
                )
                .values(**values)
                .returning(Summary.id)
            ).first()
        return updated is not None
