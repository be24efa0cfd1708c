"""Running one embedding job: claim the row, embed its texts, record and publish the
vectors. Plain functions, callable without Celery; the task only decodes the message."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from schemas.embeddings import EmbeddingRequest, pack_vectors
from schemas.errors import LlmqError
from schemas.events import JobOutcome, Timings, Usage
from schemas.jobs import JobStatus
from schemas.timeouts import DEFAULT_TIMEOUTS, Timeouts
from workers.append_combiner import AppendCombiner
from workers.embeddings.model import Embedded
from workers.jobs import (
    ClaimedJob,
    claim_job,
    fail_job,
    failure_message,
    finish_job,
    with_db_retry,
)
from workers.publisher import StreamPublisher

log = logging.getLogger(__name__)

Embed = Callable[[list[str]], Embedded]


@dataclass(frozen=True)
class EmbedRuntime:
    """What an embedding worker's jobs share."""

    worker_id: str
    sessions: sessionmaker[Session]
    redis: redis.Redis
    embed: Embed
    replay_ttl_s: int
    appends: AppendCombiner | None = None
    timeouts: Timeouts = DEFAULT_TIMEOUTS
    """The worker's ``settings.timeouts`` (database retries)."""


def run_embedding_job(runtime: EmbedRuntime, job_id: str) -> None:
    """Run embedding job ``job_id`` to its end. Never raises for a problem of the job
    itself: a job that is not queued is skipped; an invalid request, a failing model or
    a passed deadline becomes a failed row and an error event naming the problem. A
    later attempt (its worker was lost) embeds the texts afresh.

    Raises ``DatabaseUnavailable`` when the row cannot be claimed.
    """
    claimed = claim_job(runtime.sessions, job_id, runtime.worker_id)
    if claimed is None:
        log.info("job %s is not queued (running elsewhere or ended); skipping", job_id)
        return
    publisher = StreamPublisher(
        runtime.redis, job_id, ttl_s=runtime.replay_ttl_s, combiner=runtime.appends
    )
    try:
        if claimed.attempt > 1:
            publisher.resume(claimed.attempt)
        if claimed.deadline_at is not None and claimed.deadline_at <= datetime.now(UTC):
            raise LlmqError("stopped: the job ran past its deadline")
        embedded = runtime.embed(_texts(claimed))
    except Exception as exc:  # noqa: BLE001 - failure_message logs what is not an LlmqError
        _fail(runtime, publisher, claimed, failure_message(exc, job_id))
        return
    _finish(runtime, publisher, claimed, embedded)


def _texts(claimed: ClaimedJob) -> list[str]:
    try:
        return EmbeddingRequest.model_validate(claimed.request).input
    except ValidationError as exc:
        raise LlmqError(
            f"the stored request is not an embedding request: {exc.error_count()} problem(s)"
        ) from exc


def _finish(
    runtime: EmbedRuntime, publisher: StreamPublisher, claimed: ClaimedJob, embedded: Embedded
) -> None:
    text = pack_vectors(embedded.vectors)
    total_ms = claimed.ms_since_created()
    # An embedding has no tokens to stream: its first output is its whole answer.
    timings = Timings(queue_wait_ms=claimed.queue_wait_ms, ttft_ms=total_ms, total_ms=total_ms)
    usage = Usage(prompt_tokens=embedded.prompt_tokens, completion_tokens=0)
    result = JobOutcome(text, "stop", usage, timings)
    recorded = with_db_retry(
        lambda: finish_job(
            runtime.sessions, claimed.id, result, attempt=claimed.attempt, in_conversation=False
        ),
        what=f"record the result of job {claimed.id}",
        delays=runtime.timeouts.db_retry_delays_s,
    )
    if recorded is False:
        log.warning("job %s moved on from attempt %d", claimed.id, claimed.attempt)
        return
    # Published even when the database stayed down (recorded None): the reader waits
    # on the stream, and the message is redelivered only if this worker dies.
    publisher.final(result, worker_id=runtime.worker_id)


def _fail(
    runtime: EmbedRuntime, publisher: StreamPublisher, claimed: ClaimedJob, message: str
) -> None:
    log.warning("embedding job %s failed: %s", claimed.id, message)
    recorded = with_db_retry(
        lambda: fail_job(
            runtime.sessions, claimed.id, message, attempt=claimed.attempt, status=JobStatus.FAILED
        ),
        what=f"record the end of job {claimed.id}",
        delays=runtime.timeouts.db_retry_delays_s,
    )
    if recorded is False:
        return
    publisher.error(message)
