"""What chat and text completions share in serving a call: the model check, the call's
job (a new one, or the one a resumed stream names) with the stream slot it holds, the
answer whole or as a stream, the reading of a job's stream as SSE events, and the error
chunk a stream ends with.

Every call becomes a durable llmq job owned by the calling API key; the stream is the
job's event stream, each event's SSE id ``<job id>.<seq>``, so a client that
reconnects with ``Last-Event-ID`` resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from producer.aio import AsyncJobHandle
from producer.gateway.context import GatewayContext
from producer.gateway.errors import BAD_REQUEST, MODEL_NOT_FOUND, GatewayError, http_error_for
from producer.gateway.keys import KeyIdentity
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.protocol.common import (
    SSE_DONE,
    JobAnswer,
    StreamOptions,
    error_body,
    sse_event,
)
from producer.jobs import routed_tier_of
from schemas.errors import LlmqError, job_ended
from schemas.events import AnyEvent, ErrorEvent, TokenEvent
from schemas.jobs import JobResult
from schemas.queues import Priority, Tier
from schemas.settings import Settings

MODELS = ["auto", *[tier.value for tier in Tier]]

Release = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class CallOptions:
    """What a call says besides its body, as the routes read it from its headers."""

    identity: KeyIdentity | None
    """The caller's key (None when keys are off)."""
    priority: str | None = None
    """``X-Priority``; the body's ``priority`` wins over it."""
    idempotency_key: str | None = None
    last_event_id: str | None = None
    """``Last-Event-ID``: the stream to resume instead of submitting a job."""
    conversation_id: str | None = None
    admission: Awaitable[None] | None = None
    """The key's rate verdict, still to be awaited (None: given before the route):
    awaited before the call's job is sent or another job is read; raises a 429
    ``GatewayError`` when the key is over its rate."""


@dataclass(frozen=True)
class StreamedAnswer:
    """A job's stream as SSE bytes; ``release`` gives back what it holds (its handle,
    its stream slot) and must run however the stream ends, even unread."""

    handle: AsyncJobHandle
    events: AsyncIterable[bytes]
    release: Release


@dataclass(frozen=True)
class WholeAnswer:
    """A job's whole answer, as the response body."""

    handle: AsyncJobHandle
    body: dict[str, Any]


Answer = StreamedAnswer | WholeAnswer


class ServedRequest(Protocol):
    """What serving reads of a chat or text completion request's body."""

    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def stream_options(self) -> StreamOptions | None: ...
    @property
    def priority(self) -> str | None: ...
    def to_llmq(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class StreamRead:
    """How a call reads its job's stream."""

    model: str
    """The model the call asked for, the metrics' label."""
    from_seq: int
    """The first sequence number to send (past the resume point; 0 for a new job)."""
    include_usage: bool
    """Whether a usage chunk follows the answer (``stream_options.include_usage``)."""
    metrics: GatewayMetrics
    started: float
    """When the call arrived (a ``time.perf_counter()``), for the first-token metric."""
    timeout: float


EventStream = Callable[[AsyncJobHandle, StreamRead], AsyncIterator[bytes]]
"""A job's stream as SSE events."""


@dataclass(frozen=True)
class OpenedJob:
    """A call's job: its handle, the stream slot it holds (None: none), and the first
    sequence number its stream sends (past the resume point; 0 for a new job)."""

    handle: AsyncJobHandle
    release: Release | None
    from_seq: int


def served_models(settings: Settings) -> list[str]:
    """The model names a call may ask for: ``auto``, the tiers and the variants."""
    return [*MODELS, *(str(v) for v in settings.variants)]


def check_model(model: str, settings: Settings) -> None:
    """Raise a 404 ``GatewayError`` for a model llmq does not serve."""
    if model not in MODELS and model not in settings.tiers:
        raise GatewayError(
            f"unknown model {model!r}; use one of {', '.join(served_models(settings))}",
            MODEL_NOT_FOUND,
        )


class JobServing:
    """Opens calls' jobs and reads their answers, through the gateway's client."""

    def __init__(self, gateway: GatewayContext) -> None:
        self.gateway = gateway

    async def open_job(
        self,
        call: CallOptions,
        *,
        stream: bool,
        request: Callable[[], dict[str, Any]],
        tier: str,
        priority: str | None,
    ) -> OpenedJob:
        """The call's job: the one ``Last-Event-ID`` names (a resumed stream), else a
        new one of ``request()`` at ``tier``; a stream first takes its key's stream slot.

        Raises ``GatewayError`` (400 for a malformed ``Last-Event-ID``, 404 for another
        key's job, 429 over a key's limits) and the client's errors; nothing is held
        after a raise.
        """
        resume = resume_point(call.last_event_id)
        identity = call.identity
        fairness = self.gateway.fairness
        # The rate's verdict and the stream slot are asked for while the submit prepares
        # the request: their round trips are off the first token's way.
        slot = (
            asyncio.ensure_future(fairness.open_stream(identity.id))
            if stream and identity is not None
            else None
        )
        admitting = asyncio.ensure_future(_admitted(call.admission, slot))
        try:
            # One turn of the loop sends the slot's request now: once the submit's
            # thread holds the GIL, the loop could send nothing until that thread waits.
            await asyncio.sleep(0)
            if resume is not None:
                await admitting
                row = await self.gateway.owned_job(resume[0], identity)
                handle = AsyncJobHandle(
                    self.gateway.client,
                    row.id,
                    Tier(row.tier),
                    Priority(row.priority),
                    routed_tier=routed_tier_of(row),
                )
            elif identity is not None:
                async with fairness.submitting(identity.id):
                    handle = await self._submit(
                        request(), call, admitting, tier=tier, priority=priority
                    )
            else:
                handle = await self._submit(
                    request(), call, admitting, tier=tier, priority=priority
                )
        except BaseException:
            await _give_back(admitting)
            raise
        return OpenedJob(handle, admitting.result(), resume[1] + 1 if resume else 0)

    async def _submit(
        self,
        request: dict[str, Any],
        call: CallOptions,
        admission: Awaitable[Release | None],
        *,
        tier: str,
        priority: str | None,
    ) -> AsyncJobHandle:
        priority = priority or call.priority or "interactive"
        return await self.gateway.client.submit(
            request,
            admission=admission,
            tier=tier,
            priority=priority,
            idempotency_key=call.idempotency_key,
            owner=call.identity.id if call.identity else None,
            conversation_id=call.conversation_id,
            # A person is waiting: refuse now rather than queue behind no worker.
            require_warm_worker=priority == Priority.INTERACTIVE,
            # The answer is read at once: its subscription is confirmed while the job
            # is recorded instead of after, on the way to the first token.
            subscribe=True,
        )

    async def answer(
        self,
        body: ServedRequest,
        call: CallOptions,
        *,
        started: float,
        check_bounds: Callable[[Settings], None],
        events: EventStream,
        whole: Callable[[JobResult], dict[str, Any]],
    ) -> Answer:
        """The call's answer: its model checked, then its body (``check_bounds`` against
        the settings), then its job opened (``open_job``); its stream as ``events`` when
        the body asks for one, else its whole result as the body ``whole`` makes of it.
        ``started`` (a ``time.perf_counter()``) is when the call arrived, for the
        first-token metric.

        Raises ``GatewayError`` (404 for an unknown model, and what ``open_job``
        raises), what ``check_bounds`` raises, and the client's errors.
        """
        check_model(body.model, self.gateway.settings)
        check_bounds(self.gateway.settings)
        opened = await self.open_job(
            call, stream=body.stream, request=body.to_llmq, tier=body.model, priority=body.priority
        )
        if body.stream:
            read = StreamRead(
                model=body.model,
                from_seq=opened.from_seq,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                metrics=self.gateway.metrics,
                started=started,
                timeout=self.gateway.result_timeout_s,
            )
            return self.streamed(opened, events(opened.handle, read))
        result = await self.whole(opened.handle, body.model)
        return WholeAnswer(opened.handle, whole(result))

    @staticmethod
    def streamed(opened: OpenedJob, events: AsyncIterable[bytes]) -> StreamedAnswer:
        """The job's stream; its release closes the handle and frees the stream slot."""
        return StreamedAnswer(
            opened.handle, events, partial(_after_stream, opened.handle, opened.release)
        )

    async def whole(self, handle: AsyncJobHandle, model: str) -> JobResult:
        """The job's whole result, once it ended (its handle closed), counted as a 200."""
        try:
            result = await handle.result(timeout=self.gateway.result_timeout_s)
        finally:
            await handle.aclose()
        self.gateway.metrics.requests.labels(model, "200").inc()
        return result


async def _admitted(
    rate: Awaitable[None] | None, slot: asyncio.Future[Release] | None
) -> Release | None:
    """Once the call's rate verdict (``rate``, None: given already) and its stream slot
    (``slot``, None: none to take) are in: the slot's release, or None. Raises what
    either raised; nothing is held after a raise."""
    try:
        if rate is not None:
            await rate
    except BaseException:
        if slot is not None:
            await _give_back(slot)
        raise
    return await slot if slot is not None else None


async def _give_back(admitting: Awaitable[Release | None]) -> None:
    """Once ``admitting`` ended, give back the stream slot it took, if it took one."""
    with contextlib.suppress(BaseException):
        release = await asyncio.shield(admitting)
        if release is not None:
            await release()


async def _after_stream(handle: AsyncJobHandle, release_slot: Release | None) -> None:
    """However a stream ends (even before its first read), give back what it held."""
    try:
        await handle.aclose()
    finally:
        if release_slot is not None:
            await release_slot()


def answer_fields(result: JobResult, model: str) -> JobAnswer:
    """What a whole answer (``chat.completion`` or ``text_completion``) says of the job's
    result, under the model the call asked for."""
    return JobAnswer(
        job_id=result.job_id,
        model=model,
        text=result.text,
        finish_reason=result.finish_reason,
        usage=result.usage,
        timings=result.timings,
        tier=result.tier.value,
        choices=result.choices,
    )


EventChunks = Callable[[AnyEvent, bool], Iterable[dict[str, Any]]]
"""The chunks a token or final event sends, given whether it is past the resume point
(an event before it may still count, as a choice's characters do)."""


async def job_sse_events(
    handle: AsyncJobHandle, read: StreamRead, *, read_from: int, chunks: EventChunks
) -> AsyncIterator[bytes]:
    """Chunks from ``read.from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``.

    The job's events are read from ``read_from`` (at most ``read.from_seq``); ``chunks``
    says what each event sends, but an error event (past the resume point) sends the
    error chunk, as a client error ends the stream with one. The first token sent is
    timed, and the call counted under the status it ended with, however it ends.
    """
    job_id = handle.job_id
    first = read.from_seq == 0
    status = "200"
    try:
        async for event in handle.events(from_seq=read_from, timeout=read.timeout):
            event_id = f"{job_id}.{event.seq}"
            send = event.seq >= read.from_seq
            if isinstance(event, ErrorEvent):
                if send:
                    ended = job_ended(job_id, event.message, event.status)
                    status, error = error_chunk(ended, message=event.message)
                    yield sse_event(event_id, error)
                continue
            if send and first and isinstance(event, TokenEvent):
                read.metrics.ttft.labels(read.model).observe(time.perf_counter() - read.started)
                first = False
            for payload in chunks(event, send):
                yield sse_event(event_id, payload)
    except LlmqError as exc:
        status, error = error_chunk(exc)
        yield sse_event(None, error)
    finally:
        read.metrics.requests.labels(read.model, status).inc()
    yield SSE_DONE


def resume_point(last_event_id: str | None) -> tuple[str, int] | None:
    """Job id and sequence number from an SSE event id ``<job id>.<seq>``; None for no
    id. Raises a 400 ``GatewayError`` for a malformed one."""
    if not last_event_id:
        return None
    job_id, _, seq = last_event_id.strip().rpartition(".")
    # ASCII digits only (str.isdigit() also takes "²", which int() refuses), and few
    # enough that the next sequence number stays a 64-bit integer for Redis.
    if not job_id or not (seq.isascii() and seq.isdigit() and len(seq) <= 18):
        raise GatewayError(f"malformed Last-Event-ID {last_event_id!r}", BAD_REQUEST)
    return job_id, int(seq)


def error_chunk(exc: LlmqError, *, message: str | None = None) -> tuple[str, dict[str, Any]]:
    """The HTTP status a stream that ended in ``exc`` is counted under, and the error
    body it sends in OpenAI's format (``message``, else the error's own text)."""
    http = http_error_for(exc)
    text = str(exc) if message is None else message
    return str(http.status), error_body(text, kind=http.kind, code=http.code)
