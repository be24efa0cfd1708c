"""Running one job: claim the row, generate, stream every token, record the outcome.

Plain functions, callable without Celery; the Celery task only decodes the message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from kombu.exceptions import OperationalError as KombuOperationalError

from schemas.errors import EngineDead, LlmqError
from schemas.events import ChoiceOutput, JobOutcome, Timings, TokenLogprob, Usage
from schemas.jobs import CANCELLED_MESSAGE, JobStatus
from schemas.messages import ROW_WAIT_S
from schemas.queues import SERVICE_MS_KEY, Priority
from schemas.requests import GenerationRequest
from workers.choices import generate_choices
from workers.conversations import in_conversation
from workers.early_start import start_early
from workers.engine.base import DeltaStream, EngineRequest
from workers.job_input import check_context, parse_request, prompt_ids, sampling_options
from workers.jobs import (
    ClaimedJob,
    claim_job,
    fail_job,
    failure_message,
    finish_job,
    requeue_job,
    with_db_retry,
)
from workers.publisher import StreamPublisher
from workers.received_starts import EarlyStart, JobHint
from workers.running_jobs import RunningJob, StopReason
from workers.scheduler import InterTokenWindows
from workers.scheduler_driver import Ticket, handing_over
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
    engine_ttft_ms: float | None = None
    choices: list[ChoiceOutput] | None = None
    """Every choice, for a request of several (``n``); ``text`` is the first one's."""

    @property
    def text(self) -> str:
        return self.resumed_text + "".join(self.text_parts)


def run_job(runtime: WorkerRuntime, job_id: str, hint: JobHint | None = None) -> None:
    """Run job ``job_id`` to its end. Never raises for a problem of the job itself.

    A job that is not queued (running elsewhere, ended) is skipped, and so is one
    whose row never comes (with a ``hint`` the row may still be on its way, and is
    waited for: ``schemas.messages.ROW_WAIT_S``). With the message's ``hint``, the engine
    starts on the job while its row is claimed (``workers.early_start``), unless it
    did already when the message was received (``workers.received_starts``). A later
    attempt goes on from the text earlier attempts streamed. A failure becomes a failed
    row and an error event naming the problem, and the worker goes on serving. A cancel
    or the job's deadline aborts the generation and records why.
    """
    early = runtime.received.take(job_id) or start_early(runtime, job_id, hint)
    try:
        claimed = claim_job(
            runtime.sessions,
            job_id,
            runtime.worker_id,
            engine_warm=runtime.warm.is_set(),
            # A message that carries its request may be sent before its row is written.
            row_wait_s=ROW_WAIT_S if hint is not None else 0.0,
        )
    except BaseException:
        if early is not None:
            early.abort()
        raise
    if early is not None and (claimed is None or not early.matches(claimed)):
        early.abort()
        early = None
    if claimed is None:
        log.info("job %s is not queued (running elsewhere or ended); skipping", job_id)
        return
    _run_claimed(runtime, claimed, early)


def _run_claimed(runtime: WorkerRuntime, claimed: ClaimedJob, early: EarlyStart | None) -> None:
    job_id = claimed.id
    publisher = StreamPublisher(
        runtime.redis, job_id, ttl_s=runtime.settings.replay_ttl_s, combiner=runtime.appends
    )
    running = runtime.running.start(
        job_id, early.running if early is not None else None, priority=claimed.priority
    )
    try:
        resumed = _resumed_text(publisher, claimed)
        running.stop_at(_seconds_left(runtime, claimed))
        generation = generate(
            runtime, claimed, publisher, running, resumed_text=resumed, early=early
        )
    except EngineDead as exc:
        _fail(runtime, publisher, claimed, f"{exc}; the worker is restarting")
        runtime.on_engine_dead()
        return
    except Exception as exc:  # noqa: BLE001 - failure_message logs what is not an LlmqError
        _fail(runtime, publisher, claimed, failure_message(exc, job_id))
        return
    finally:
        runtime.running.finish(job_id)
    if running.reason is StopReason.YIELDED and generation.finish_reason is None:
        _yielded(runtime, claimed)
        return
    if running.reason is not None and generation.finish_reason is None:
        _stopped(runtime, publisher, claimed, running.reason)
        return
    _finish(runtime, publisher, claimed, generation)


def _resumed_text(publisher: StreamPublisher, claimed: ClaimedJob) -> str:
    """What earlier runs of the job streamed, for this run to go on from: an earlier
    attempt's (its worker was lost), or a batch job's own, published as it gave way
    (``_keep_held``); "" for a job that starts afresh."""
    if claimed.attempt > 1 or claimed.priority == Priority.BATCH:
        return publisher.resume(claimed.attempt)
    return ""


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
        engine_ttft_ms=generation.engine_ttft_ms,
    )
    usage = Usage(
        prompt_tokens=generation.prompt_tokens,
        completion_tokens=generation.completion_tokens,
        cached_prompt_tokens=generation.cached_prompt_tokens,
    )
    result = JobOutcome(
        generation.text, generation.finish_reason, usage, timings, generation.choices
    )
    recorded = _record(
        runtime,
        lambda: finish_job(
            runtime.sessions,
            job_id,
            result,
            attempt=claimed.attempt,
            in_conversation=in_conversation(claimed.request),
            logprobs=_logprobs_to_keep(claimed, publisher, generation),
        ),
        what=f"record the result of job {job_id}",
    )
    if recorded is False:
        _superseded(claimed)
        return
    publisher.final(result, worker_id=runtime.worker_id)
    # After the final event: its reader waits for nothing below.
    record_service_ms(runtime, timings.total_ms - timings.queue_wait_ms)
    if claimed.priority == Priority.INTERACTIVE and timings.engine_ttft_ms is not None:
        runtime.scheduling.scheduler.interactive_finished(timings.engine_ttft_ms / 1000.0)
    if generation.choices and claimed.priority == Priority.INTERACTIVE:
        # Choices generated side by side are observed once, as they end (a single
        # answer is observed while it streams: ``generate``); a token's time is one
        # choice's.
        tokens = usage.completion_tokens // len(generation.choices)
        if tokens > 1 and timings.ttft_ms is not None:
            runtime.interactive_inter_token(
                (timings.total_ms - timings.ttft_ms) / (tokens - 1) / 1000.0
            )
    if runtime.metrics is not None:
        runtime.metrics.observe_done(
            claimed.priority,
            queue_wait_ms=timings.queue_wait_ms,
            ttft_ms=timings.ttft_ms,
            total_ms=timings.total_ms,
            completion_tokens=usage.completion_tokens,
        )


def _logprobs_to_keep(
    claimed: ClaimedJob, publisher: StreamPublisher, generation: Generation
) -> list[list[TokenLogprob]] | None:
    """Each choice's token log probabilities, for a job that asked for them (its row
    keeps them: a batch's output is built from rows); None otherwise."""
    sampling = claimed.request.get("sampling")
    if not isinstance(sampling, dict) or sampling.get("logprobs") is None:
        return None
    return publisher.logprobs_by_choice(len(generation.choices) if generation.choices else 1)


# The tier's moving average of service time, folded in one round trip (and atomically:
# two workers of a tier finishing at once both count).
_FOLD_SERVICE_MS = """
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or ARGV[2])
local alpha = tonumber(ARGV[3])
local average = (1 - alpha) * current + alpha * tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], tostring(average))
"""


def record_service_ms(runtime: WorkerRuntime, service_ms: float, alpha: float = 0.2) -> None:
    """Fold one job's service time into the tier's moving average (load-aware routing)."""
    try:
        runtime.redis.eval(
            _FOLD_SERVICE_MS, 1, SERVICE_MS_KEY, runtime.tier.value, repr(service_ms), alpha
        )
    except redis.RedisError:
        log.warning("could not record the service time of a %s job", runtime.tier)


@dataclass(frozen=True)
class _Started:
    """A job's request as the engine got it."""

    request: GenerationRequest
    prompt_ids: list[int]
    deltas: DeltaStream | None
    """None when earlier attempts already generated every token asked for."""
    started_at: float
    """``time.monotonic()`` as the worker began rendering the prompt."""
    resumed_tokens: int = 0
    ticket: Ticket | None = None
    """Given back at the first token: an interactive request's first-token ticket, a
    batch job's prefill place."""


def generate(
    runtime: WorkerRuntime,
    claimed: ClaimedJob,
    publisher: StreamPublisher,
    running: RunningJob,
    *,
    resumed_text: str = "",
    early: EarlyStart | None = None,
) -> Generation:
    """Stream the job's completion, publishing each chunk as it arrives.

    With ``resumed_text`` (what earlier attempts streamed), the model continues that
    text rather than starting over, so readers see one coherent answer. With ``early``,
    the engine is already on it (started from the message, before the claim). A request
    for several choices (``n``) runs them side by side (``workers.choices``).
    """
    if early is None and claimed.request.get("n", 1) != 1:
        return _generate_choices(runtime, claimed, publisher, running)
    started = (
        _Started(
            early.request, early.prompt_ids, early.deltas, early.started_at, ticket=early.ticket
        )
        if early is not None
        else _start(runtime, claimed, running, resumed_text)
    )
    generation = Generation(
        resumed_text=resumed_text,
        resumed_tokens=started.resumed_tokens,
        prompt_tokens=len(started.prompt_ids),
    )
    if started.deltas is None:
        generation.finish_reason = "length"
        generation.completion_tokens = started.resumed_tokens
        return generation
    # Elapsed time is measured on the monotonic clock from the claim on.
    claim_offset_ms = claimed.queue_wait_ms
    windows = _inter_token_windows(runtime, claimed)
    try:
        for delta in started.deltas:
            windows.arrived(time.monotonic(), delta.completion_tokens)
            if started.ticket is not None:
                # The first delta comes at the first token, text or not (a batch
                # answer's first delta is empty): the prompt is through prefill.
                started.ticket.give_back()
            first_token_ms = None
            if delta.text and generation.ttft_ms is None:
                now = time.monotonic()
                since_claim_s = now - claimed.claimed_monotonic
                first_token_ms = generation.ttft_ms = claim_offset_ms + since_claim_s * 1000.0
                generation.engine_ttft_ms = (now - started.started_at) * 1000.0
            if delta.text:
                generation.text_parts.append(delta.text)
            if delta.text or delta.logprobs:
                # A token may decode to no text yet (part of a character): its log
                # probability still goes out, in order.
                publisher.token(delta.text, delta.logprobs)
            if first_token_ms is not None and claimed.priority == Priority.INTERACTIVE:
                # Observed once the token is out: its reader does not wait for the
                # share's decision (measured as of ``now`` all the same).
                runtime.interactive_first_token(first_token_ms / 1000.0)
            if delta.cached_tokens is not None:
                generation.cached_prompt_tokens = delta.cached_tokens
            generation.completion_tokens = started.resumed_tokens + delta.completion_tokens
            generation.finish_reason = delta.finish_reason or generation.finish_reason
        if running.reason is StopReason.YIELDED and generation.finish_reason is None:
            _keep_held(started, publisher, generation)
        windows.finished()
    finally:
        started.deltas.close()
        if started.ticket is not None:
            started.ticket.give_back()
    runtime.prefix_stats.record(
        prompt_tokens=generation.prompt_tokens,
        cached_tokens=generation.cached_prompt_tokens,
        system_prompt=started.request.system_prompt,
    )
    return generation


def _inter_token_windows(runtime: WorkerRuntime, claimed: ClaimedJob) -> InterTokenWindows:
    """The windows an interactive stream's time between tokens is observed in (against
    the SLO: ``WorkerRuntime.interactive_inter_token``); a batch job's go nowhere."""
    if claimed.priority == Priority.INTERACTIVE:
        return InterTokenWindows(runtime.interactive_inter_token)
    return InterTokenWindows(lambda _seconds: None)


def _keep_held(started: _Started, publisher: StreamPublisher, generation: Generation) -> None:
    """A batch job gives way: what the engine held of its answer is published, so that
    its next run goes on from that text (``_resumed_text``) instead of generating it
    again. A structured answer cannot go on from part of itself: its next run starts
    afresh."""
    if started.deltas is None or _structured(started.request):
        return
    held = started.deltas.held()
    if held is None or not held.text:
        return
    generation.text_parts.append(held.text)
    publisher.token(held.text, held.logprobs)


def _structured(request: GenerationRequest) -> bool:
    """Whether the engine's grammar constrains the answer from its first token (a JSON
    schema, a grammar): such an answer cannot go on from part of itself."""
    return request.sampling is not None and request.sampling.structured is not None


def _generate_choices(
    runtime: WorkerRuntime, claimed: ClaimedJob, publisher: StreamPublisher, running: RunningJob
) -> Generation:
    request = parse_request(claimed.request)
    outcome = generate_choices(runtime, claimed, publisher, running, request)
    runtime.prefix_stats.record(
        prompt_tokens=outcome.prompt_tokens,
        cached_tokens=outcome.cached_prompt_tokens,
        system_prompt=request.system_prompt,
    )
    return Generation(
        resumed_text=outcome.choices[0].text,
        prompt_tokens=outcome.prompt_tokens,
        cached_prompt_tokens=outcome.cached_prompt_tokens,
        completion_tokens=outcome.completion_tokens,
        finish_reason=outcome.finish_reason,
        ttft_ms=outcome.ttft_ms,
        engine_ttft_ms=outcome.engine_ttft_ms,
        choices=outcome.choices,
    )


def _start(
    runtime: WorkerRuntime, claimed: ClaimedJob, running: RunningJob, resumed_text: str
) -> _Started:
    """Submit the claimed job to the engine, after what earlier attempts streamed; a
    batch job first waits where the worker's scheduler holds it (``workers.scheduler``)."""
    started_at = time.monotonic()
    request = parse_request(claimed.request)
    if resumed_text and _structured(request):
        # The engine's grammar constrains an answer from its first token: continued
        # after text already streamed, it would append a second structure to the first.
        raise LlmqError(
            "the worker was lost mid-answer and a structured answer cannot go on from "
            "part of it; send the request again"
        )
    prompt = prompt_ids(request, runtime)
    resumed_ids = runtime.engine.encode(resumed_text) if resumed_text else []
    check_context(len(prompt), request.max_tokens, runtime)
    if len(resumed_ids) >= request.max_tokens:
        return _Started(request, prompt, None, started_at, len(resumed_ids))
    ticket: Ticket
    if claimed.priority == Priority.INTERACTIVE:
        ticket = runtime.scheduling.interactive_ticket()
    else:
        # The wait is the worker's scheduling, not the engine's: left out of started_at.
        waited_from = time.monotonic()
        ticket = runtime.scheduling.batch_ticket()
        started_at += time.monotonic() - waited_from
    with handing_over(ticket):
        deltas = runtime.engine.stream(
            EngineRequest(
                prompt + resumed_ids,
                sampling_options(request, claimed.priority, done_tokens=len(resumed_ids)),
                f"{claimed.id}-{claimed.attempt}",
            ),
            stop=running.stop,
        )
    return _Started(request, prompt, deltas, started_at, len(resumed_ids), ticket)


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
    recorded = _record(
        runtime,
        lambda: fail_job(runtime.sessions, job_id, message, attempt=claimed.attempt, status=status),
        what=f"record the end of job {job_id}",
    )
    if recorded is False:
        _superseded(claimed)
        return
    publisher.error(message, status)


def _yielded(runtime: WorkerRuntime, claimed: ClaimedJob) -> None:
    """Send a batch job that gave way to interactive work back to its queue.

    Giving way spends no attempt. What the job generated before it gave way was
    published (``_keep_held``), so its next run goes on from that text, as after a
    crash, rather than computing it again. Should the message be lost (Redis away,
    this worker dying), the reaper re-sends a queued row that has none.
    """
    job_id = runtime.scheduling.scheduler.gave_way(claimed.id).job_id

    def after(requeued: bool) -> None:
        if requeued:
            _resend(runtime, claimed)
        else:
            _superseded(claimed)

    _record(
        runtime,
        lambda: requeue_job(runtime.sessions, job_id, attempt=claimed.attempt),
        what=f"put job {job_id} back in its queue",
        then=after,
    )


def _resend(runtime: WorkerRuntime, claimed: ClaimedJob) -> None:
    """Send a requeued job's message again; if that fails, the reaper's sweep will."""
    if runtime.resend is None:
        return
    try:
        runtime.resend(claimed.id, runtime.tier, Priority(claimed.priority))
    except (redis.RedisError, KombuOperationalError) as exc:
        log.warning(
            "job %s is queued but could not be re-sent (%s); the reaper will", claimed.id, exc
        )
        return
    log.info("batch job %s gave way to interactive work; back in its queue", claimed.id)


def _record(
    runtime: WorkerRuntime,
    write: Callable[[], bool],
    *,
    what: str,
    then: Callable[[bool], None] | None = None,
) -> bool | None:
    """Write a job's end through a database blip; None if the database stayed down,
    and then the write waits in ``runtime.deferred``. ``then`` is told the write's
    result once it ran, now or after the outage."""
    recorded = with_db_retry(write, what=what, delays=runtime.settings.timeouts.db_retry_delays_s)
    if recorded is None:
        runtime.deferred.add(what, write, then=then)
    elif then is not None:
        then(recorded)
    return recorded


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
