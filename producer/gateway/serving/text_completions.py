"""Serving a text completion: the request becomes a job, and the job's stream becomes
``text_completion`` chunks (one choice, or several each apart) or a whole
``text_completion``; a job like a chat completion's (keys, priorities, idempotency,
resume)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.context import RESULT_TIMEOUT_S
from producer.gateway.metrics import GatewayMetrics
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
    WholeAnswer,
    check_model,
)
from schemas.events import TokenEvent, Usage


class TextCompletionServing:
    """``POST /v1/completions`` once the route has read the call."""

    def __init__(self, jobs: JobServing) -> None:
        self.jobs = jobs

    async def create(self, body: CompletionRequest, call: CallOptions, *, started: float) -> Answer:
        """The call's answer: the prompt continued as it is, without the chat template;
        streamed when the body asks, else whole. ``started`` (a ``time.perf_counter()``)
        is when the call arrived, for the first-token metric.

        Raises ``GatewayError`` (404 for an unknown model, and what opening the job
        raises), ``InvalidRequest`` for a prompt past the settings' bound, and the
        client's errors.
        """
        gateway = self.jobs.gateway
        check_model(body.model, gateway.settings)
        body.check_bounds(max_message_chars=gateway.settings.max_message_chars)
        opened = await self.jobs.open_job(
            call, stream=body.stream, request=body.to_llmq, tier=body.model, priority=body.priority
        )
        if body.stream:
            events = completion_sse_events(
                opened.handle,
                model=body.model,
                from_seq=opened.from_seq,
                logprobs=body.logprobs,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                metrics=gateway.metrics,
                started=started,
                timeout=RESULT_TIMEOUT_S,
            )
            return self.jobs.streamed(opened, events)
        result = await self.jobs.whole(opened.handle, body.model)
        answer = text_completion(
            job_id=result.job_id,
            model=body.model,
            text=result.text,
            finish_reason=result.finish_reason,
            usage=result.usage,
            timings=result.timings,
            tier=result.tier.value,
            logprobs=body.logprobs,
            tokens=result.logprobs or [],
            choices=result.choices,
        )
        return WholeAnswer(opened.handle, answer)


def completion_sse_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    logprobs: int | None,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
) -> AsyncIterator[bytes]:
    """Chunks from ``from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``.

    Each token's ``text_offset`` (with ``logprobs``) counts its choice's text before
    it, in a resumed stream too.
    """
    job_id = handle.job_id

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

    return choice_sse_events(
        handle,
        model=model,
        from_seq=from_seq,
        include_usage=include_usage,
        metrics=metrics,
        started=started,
        timeout=timeout,
        piece=piece,
        finish=finish,
        usage_chunk=usage_chunk,
    )
