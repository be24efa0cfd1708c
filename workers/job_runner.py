"""Running one job: claim the row, generate, stream every token, record the outcome.

Plain functions, callable without Celery; the Celery task only decodes the message.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import redis
from pydantic import ValidationError

from schemas.errors import EngineDead, LlmqError, PromptTooLong
from schemas.events import Timings, Usage
from schemas.jobs import CANCELLED_MESSAGE, JobStatus
from schemas.queues import SERVICE_MS_KEY, Priority
from schemas.requests import GenerationRequest
from workers.engine.base import BACKGROUND_PRIORITY, INTERACTIVE_PRIORITY, SamplingOptions
from workers.jobs import (
    ClaimedJob,
    claim_job,
    fail_job,
    finish_job,
    with_db_retry,
)
from workers.publisher import StreamPublisher
from workers.running_jobs import RunningJob, StopReason
from workers.worker_runtime import WorkerRuntime

log = logging.getLogger(__name__)


@dataclass
class Generation:
    """What came out of the engine for one job (after what earlier attempts streamed)."""

    resumed_text: str = ""
    resumed_tokens: int = 0
    text_parts: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    ttft_ms: float | None = None

    @property
    def text(self) -> str:
        return self.resumed_text + "".join(self.text_parts)


def run_job(runtime: WorkerRuntime, job_id: str) -> None:
    """Run job ``job_id`` to its end. Never raises for a problem of the job itself.

    A job that is not queued (unknown, running elsewhere, ended) is skipped. A later
    attempt goes on from the text earlier attempts streamed. A failure becomes a
    failed row and an error event naming the problem, and the worker goes on serving.
    A cancel or the job's deadline aborts the generation and records why.
    """
    claimed = claim_job(
        runtime.sessions, job_id, runtime.worker_id, engine_warm=runtime.warm.is_set()
    )
    if claimed is None:
        log.info("job %s is not queued (running elsewhere or ended); skipping", job_id)
        return
    publisher = StreamPublisher(runtime.redis, job_id, ttl_s=runtime.settings.replay_ttl_s)
    running = runtime.running.start(job_id)
    try:
        resumed = publisher.resume(claimed.attempt) if claimed.attempt > 1 else ""
        running.stop_at(_seconds_left(runtime, claimed))
        generation = generate(runtime, claimed, publisher, running, resumed_text=resumed)
    except EngineDead as exc:
        _fail(runtime, publisher, claimed, f"{exc}; the worker is restarting")
        runtime.on_engine_dead()
        return
    except LlmqError as exc:
        _fail(runtime, publisher, claimed, str(exc))
        return
    except Exception as exc:
        log.exception("job %s failed unexpectedly", job_id)
        _fail(runtime, publisher, claimed, f"internal worker error ({exc.__class__.__name__})")
        return
    finally:
        runtime.running.finish(job_id)
    if running.reason is not None and generation.finish_reason is None:
        _stopped(runtime, publisher, claimed, running.reason)
        return
    _finish(runtime, publisher, claimed, generation)


def _seconds_left(runtime: WorkerRuntime, claimed: ClaimedJob) -> float:
    """Until the job's own deadline or the tier's longest job time, whichever is first."""
    limit_s = float(runtime.settings.tier(runtime.tier).max_job_seconds)
    if claimed.deadline_at is not None:
        limit_s = min(limit_s, (claimed.deadline_at - claimed.started_at).total_seconds())
    return limit_s


def _finish(
    runtime: WorkerRuntime,
    publisher: StreamPublisher,
    claimed: ClaimedJob,
    generation: Generation,
) -> None:
    job_id = claimed.id
    timings = Timings(
        queue_wait_ms=claimed.queue_wait_ms,
        ttft_ms=generation.ttft_ms,
        total_ms=claimed.ms_since_created(),
    )
    usage = Usage(
        prompt_tokens=generation.prompt_tokens,
        completion_tokens=generation.completion_tokens,
        cached_prompt_tokens=generation.cached_prompt_tokens,
    )
    recorded = with_db_retry(
        lambda: finish_job(
            runtime.sessions,
            job_id,
            attempt=claimed.attempt,
            text=generation.text,
            finish_reason=generation.finish_reason,
            usage=usage,
            timings=timings,
        ),
        what=f"record the result of job {job_id}",
    )
    if recorded is False:
        _superseded(claimed)
        return
    record_service_ms(runtime, timings.total_ms - timings.queue_wait_ms)
    if runtime.metrics is not None:
        runtime.metrics.observe_done(
            claimed.priority,
            queue_wait_ms=timings.queue_wait_ms,
            ttft_ms=timings.ttft_ms,
            total_ms=timings.total_ms,
            completion_tokens=usage.completion_tokens,
        )
    publisher.final(
        text=generation.text,
        finish_reason=generation.finish_reason,
        usage=usage,
        timings=timings,
        worker_id=runtime.worker_id,
    )


def record_service_ms(runtime: WorkerRuntime, service_ms: float, alpha: float = 0.2) -> None:
    """Fold one job's service time into the tier's moving average (load-aware routing)."""
    try:
        raw = runtime.redis.hget(SERVICE_MS_KEY, runtime.tier.value)
        current = float(raw) if raw is not None else service_ms
        average = (1 - alpha) * current + alpha * service_ms
        runtime.redis.hset(SERVICE_MS_KEY, runtime.tier.value, average)
    except redis.RedisError:
        log.warning("could not record the service time of a %s job", runtime.tier)


def generate(
    runtime: WorkerRuntime,
    claimed: ClaimedJob,
    publisher: StreamPublisher,
    running: RunningJob,
    *,
    resumed_text: str = "",
) -> Generation:
    """Stream the job's completion, publishing each chunk as it arrives.

    With ``resumed_text`` (what earlier attempts streamed), the model continues that
    text rather than starting over, so readers see one coherent answer.
    """
    request = _stored_request(claimed)
    prompt_ids = runtime.engine.render_chat(chat_messages(request, runtime))
    resumed_ids = runtime.engine.encode(resumed_text) if resumed_text else []
    _check_context(len(prompt_ids), request.max_tokens, runtime)
    generation = Generation(
        resumed_text=resumed_text,
        resumed_tokens=len(resumed_ids),
        prompt_tokens=len(prompt_ids),
        finish_reason="length" if len(resumed_ids) >= request.max_tokens else None,
    )
    if generation.finish_reason is not None:
        generation.completion_tokens = len(resumed_ids)
        return generation
    options = SamplingOptions(
        max_tokens=request.max_tokens - len(resumed_ids),
        temperature=request.temperature,
        top_p=request.top_p,
        stop=tuple(request.stop),
        seed=request.seed,
        stream_tokens=claimed.priority == Priority.INTERACTIVE.value,
        priority=INTERACTIVE_PRIORITY
        if claimed.priority == Priority.INTERACTIVE.value
        else BACKGROUND_PRIORITY,
    )
    # Elapsed time is measured on the monotonic clock from the claim on.
    claim_offset_ms = claimed.queue_wait_ms
    started = claimed.claimed_monotonic
    request_id = f"{claimed.id}-{claimed.attempt}"
    deltas = runtime.engine.stream(prompt_ids + resumed_ids, options, request_id, stop=running.stop)
    for delta in deltas:
        if delta.text:
            if generation.ttft_ms is None:
                generation.ttft_ms = claim_offset_ms + (time.monotonic() - started) * 1000.0
            generation.text_parts.append(delta.text)
            publisher.token(delta.text)
        if delta.cached_tokens is not None:
            generation.cached_prompt_tokens = delta.cached_tokens
        generation.completion_tokens = len(resumed_ids) + delta.completion_tokens
        generation.finish_reason = delta.finish_reason or generation.finish_reason
    runtime.prefix_stats.record(
        prompt_tokens=generation.prompt_tokens,
        cached_tokens=generation.cached_prompt_tokens,
        system_prompt=request.system_prompt,
    )
    return generation


def chat_messages(request: GenerationRequest, runtime: WorkerRuntime) -> list[dict[str, str]]:
    """The conversation as the model sees it: the registered system prompt, then the turns.

    The system prompt's text comes from the registry file byte for byte, so its tokens,
    and so its cached prefix, are the same for every request that names it.
    """
    messages = [message.model_dump() for message in request.messages]
    if request.system_prompt is None:
        return messages
    prompt = runtime.prompts.registry.resolve(request.system_prompt, tier=runtime.tier.base)
    return [{"role": "system", "content": prompt.text}, *messages]


def _stored_request(claimed: ClaimedJob) -> GenerationRequest:
    try:
        return GenerationRequest.model_validate(claimed.request)
    except ValidationError as exc:
        raise LlmqError(f"the stored request is invalid: {exc.error_count()} problem(s)") from exc


def _check_context(prompt_tokens: int, max_tokens: int, runtime: WorkerRuntime) -> None:
    context = runtime.engine.max_model_len
    if prompt_tokens + max_tokens > context:
        raise PromptTooLong(
            f"the prompt is {prompt_tokens} tokens; with max_tokens={max_tokens} it exceeds "
            f"the {runtime.tier} tier's context window of {context} tokens"
        )


def _fail(
    runtime: WorkerRuntime,
    publisher: StreamPublisher,
    claimed: ClaimedJob,
    message: str,
    *,
    status: JobStatus = JobStatus.FAILED,
) -> None:
    job_id = claimed.id
    log.warning("job %s ended %s: %s", job_id, status, message)
    if runtime.metrics is not None:
        runtime.metrics.observe_failed(claimed.priority)
    recorded = with_db_retry(
        lambda: fail_job(runtime.sessions, job_id, message, attempt=claimed.attempt, status=status),
        what=f"record the end of job {job_id}",
    )
    if recorded is False:
        _superseded(claimed)
        return
    publisher.error(message)


def _superseded(claimed: ClaimedJob) -> None:
    # This worker was taken for dead and the job re-run (or it ended meanwhile): the
    # outcome of this attempt must reach neither the row nor the stream.
    log.warning(
        "job %s moved on from attempt %d; dropping its outcome", claimed.id, claimed.attempt
    )


def _stopped(
    runtime: WorkerRuntime, publisher: StreamPublisher, claimed: ClaimedJob, reason: StopReason
) -> None:
    if reason is StopReason.CANCELLED:
        _fail(runtime, publisher, claimed, CANCELLED_MESSAGE, status=JobStatus.CANCELLED)
        return
    _fail(runtime, publisher, claimed, "stopped: the job ran past its deadline")
