"""What chat and text completions share in serving a call: the model check, the call's
job (a new one, or the one a resumed stream names) with the stream slot it holds, the
answer whole or as a stream, and the error chunk a stream ends with.

Every call becomes a durable llmq job owned by the calling API key; the stream is the
job's event stream, each event's SSE id ``<job id>.<seq>``, so a client that
reconnects with ``Last-Event-ID`` resumes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.context import RESULT_TIMEOUT_S, GatewayContext
from producer.gateway.errors import BAD_REQUEST, MODEL_NOT_FOUND, GatewayError, http_error_for
from producer.gateway.keys import KeyIdentity
from producer.gateway.protocol.common import error_body
from producer.jobs import routed_tier_of
from schemas.errors import LlmqError
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
        release = None
        if stream and identity is not None:
            release = await fairness.open_stream(identity.id)
        try:
            if resume is not None:
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
                    handle = await self._submit(request(), call, tier=tier, priority=priority)
            else:
                handle = await self._submit(request(), call, tier=tier, priority=priority)
        except BaseException:
            if release is not None:
                await release()
            raise
        return OpenedJob(handle, release, resume[1] + 1 if resume else 0)

    async def _submit(
        self, request: dict[str, Any], call: CallOptions, *, tier: str, priority: str | None
    ) -> AsyncJobHandle:
        priority = priority or call.priority or "interactive"
        return await self.gateway.client.submit(
            request,
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

    @staticmethod
    def streamed(opened: OpenedJob, events: AsyncIterable[bytes]) -> StreamedAnswer:
        """The job's stream; its release closes the handle and frees the stream slot."""
        return StreamedAnswer(
            opened.handle, events, partial(_after_stream, opened.handle, opened.release)
        )

    async def whole(self, handle: AsyncJobHandle, model: str) -> JobResult:
        """The job's whole result, once it ended (its handle closed), counted as a 200."""
        try:
            result = await handle.result(timeout=RESULT_TIMEOUT_S)
        finally:
            await handle.aclose()
        self.gateway.metrics.requests.labels(model, "200").inc()
        return result


async def _after_stream(handle: AsyncJobHandle, release_slot: Release | None) -> None:
    """However a stream ends (even before its first read), give back what it held."""
    try:
        await handle.aclose()
    finally:
        if release_slot is not None:
            await release_slot()


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
