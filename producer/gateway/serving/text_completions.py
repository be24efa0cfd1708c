"""Serving a text completion: the request becomes a job, and the job's stream becomes
``text_completion`` chunks (one choice, or several each apart) or a whole
``text_completion``; a job like a chat completion's (keys, priorities, idempotency,
resume)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.protocol.text_completions import (
    CompletionRequest,
    legacy_logprobs,
    text_chunk,
    text_completion,
)
from producer.gateway.serving.choice_stream import choice_sse_events
from producer.gateway.serving.common import (
    Answer,
    CallOptions,
    JobServing,
    StreamRead,
    answer_fields,
)
from schemas.events import TokenEvent, Usage
from schemas.jobs import JobResult
from schemas.settings import Settings


@dataclass
class TextCompletionServing:
    """``POST /v1/completions`` once the route has read the call."""

    jobs: JobServing

    async def create(self, body: CompletionRequest, call: CallOptions, *, started: float) -> Answer:
        """The call's answer: the prompt continued as it is, without the chat template;
        streamed when the body asks, else whole. ``started`` (a ``time.perf_counter()``)
        is when the call arrived, for the first-token metric.

        Raises ``GatewayError`` (404 for an unknown model, and what opening the job
        raises), ``InvalidRequest`` for a prompt past the settings' bound, and the
        client's errors.
        """

        def whole(result: JobResult) -> dict[str, Any]:
            return text_completion(
                answer_fields(result, body.model),
                logprobs=body.logprobs,
                tokens=result.logprobs or [],
            )

        events = partial(completion_sse_events, logprobs=body.logprobs)

        def check_bounds(settings: Settings) -> None:
            body.check_bounds(max_message_chars=settings.max_message_chars)

        return await self.jobs.answer(
            body, call, started=started, check_bounds=check_bounds, events=events, whole=whole
        )


def completion_sse_events(
    handle: AsyncJobHandle, read: StreamRead, *, logprobs: int | None
) -> AsyncIterator[bytes]:
    """Chunks from ``read.from_seq`` on, then ``[DONE]``; each SSE id is
    ``<job id>.<seq>``.

    Each token's ``text_offset`` (with ``logprobs``) counts its choice's text before
    it, in a resumed stream too.
    """
    job_id = handle.job_id
    model = read.model

    def piece(event: TokenEvent, before: int, _opening: bool) -> dict[str, Any]:
        block = None
        if logprobs is not None:
            block = legacy_logprobs(event.logprobs or [], top=logprobs, offset=before)
        return text_chunk(
            job_id=job_id, model=model, text=event.text, logprobs=block, index=event.index
        )

    def finish(index: int, reason: str) -> dict[str, Any]:
        return text_chunk(job_id=job_id, model=model, finish_reason=reason, index=index)

    def usage_chunk(usage: Usage) -> dict[str, Any]:
        return text_chunk(job_id=job_id, model=model, usage=usage)

    return choice_sse_events(handle, read, piece=piece, finish=finish, usage_chunk=usage_chunk)
