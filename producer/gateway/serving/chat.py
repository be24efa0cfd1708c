"""Serving a chat completion: the request becomes a job, and the job's stream becomes
``chat.completion.chunk`` events (one choice, or several each apart) or a whole
``chat.completion``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.context import RESULT_TIMEOUT_S
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.protocol.chat import (
    ChatCompletionRequest,
    answer_message,
    chunk,
    completion,
    tool_call_deltas,
)
from producer.gateway.protocol.common import SSE_DONE, sse_event
from producer.gateway.serving.choice_stream import choice_sse_events
from producer.gateway.serving.common import (
    Answer,
    CallOptions,
    JobServing,
    WholeAnswer,
    check_model,
    error_chunk,
)
from schemas.errors import LlmqError, job_ended
from schemas.events import ErrorEvent, FinalEvent, TokenEvent, Usage
from schemas.tools import ToolCall, ToolUse, call_id, may_become_call


class ChatServing:
    """``POST /v1/chat/completions`` once the route has read the call."""

    def __init__(self, jobs: JobServing) -> None:
        self.jobs = jobs

    async def create(
        self, body: ChatCompletionRequest, call: CallOptions, *, started: float
    ) -> Answer:
        """The call's answer: streamed when the body asks, else whole. ``started`` (a
        ``time.perf_counter()``) is when the call arrived, for the first-token metric.

        Raises ``GatewayError`` (404 for an unknown model, and what opening the job
        raises), ``InvalidRequest`` past the settings' bounds, and the client's errors.
        """
        gateway = self.jobs.gateway
        settings = gateway.settings
        check_model(body.model, settings)
        body.check_bounds(
            max_messages=settings.max_messages, max_message_chars=settings.max_message_chars
        )
        opened = await self.jobs.open_job(
            call, stream=body.stream, request=body.to_llmq, tier=body.model, priority=body.priority
        )
        if body.stream:
            # Several choices stream each apart (choice_stream); a tool answer is one.
            stream = (
                chat_choice_events
                if body.n > 1
                else partial(chat_sse_events, tool_use=body.tool_use())
            )
            events = stream(
                opened.handle,
                model=body.model,
                from_seq=opened.from_seq,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                metrics=gateway.metrics,
                started=started,
                timeout=RESULT_TIMEOUT_S,
            )
            return self.jobs.streamed(opened, events)
        result = await self.jobs.whole(opened.handle, body.model)
        answer = completion(
            job_id=result.job_id,
            model=body.model,
            text=result.text,
            finish_reason=result.finish_reason,
            usage=result.usage,
            timings=result.timings,
            tier=result.tier.value,
            logprobs=(result.logprobs or []) if body.logprobs else None,
            tool_use=body.tool_use(),
            choices=result.choices,
        )
        return WholeAnswer(opened.handle, answer)


async def chat_sse_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
    tool_use: ToolUse | None = None,
) -> AsyncIterator[bytes]:
    """Chunks from ``from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``.

    With ``tool_use``, the answer's calls go out as ``delta.tool_calls`` (``ToolStream``).
    """
    job_id = handle.job_id
    first = from_seq == 0
    role_pending = first
    tools = ToolStream(tool_use, job_id, resumed=not first) if tool_use is not None else None
    status = "200"
    try:
        async for event in handle.events(from_seq=from_seq, timeout=timeout):
            event_id = f"{job_id}.{event.seq}"
            if isinstance(event, TokenEvent):
                if first:
                    metrics.ttft.labels(model).observe(time.perf_counter() - started)
                    first = False
                delta: dict[str, Any] | None = {"content": event.text}
                if tools is not None:
                    delta = tools.on_token(event.text)
                if delta is None:
                    continue  # held: it may be part of a call
                delta, role_pending = _opening(delta, role_pending), False
                logprobs = event.logprobs if tools is None or tools.streams_tokens else None
                piece = chunk(job_id=job_id, model=model, delta=delta, logprobs=logprobs)
                yield sse_event(event_id, piece)
            elif isinstance(event, FinalEvent):
                rest, reason = (
                    tools.on_final(event.text, event.finish_reason)
                    if tools is not None
                    else (None, event.finish_reason or "stop")
                )
                if rest is not None:
                    rest, role_pending = _opening(rest, role_pending), False
                    yield sse_event(event_id, chunk(job_id=job_id, model=model, delta=rest))
                yield sse_event(
                    event_id,
                    chunk(job_id=job_id, model=model, delta={}, finish_reason=reason),
                )
                if include_usage:
                    usage = chunk(job_id=job_id, model=model, delta={}, usage=event.usage)
                    yield sse_event(event_id, usage)
            elif isinstance(event, ErrorEvent):
                ended = job_ended(job_id, event.message, event.status)
                status, error = error_chunk(ended, message=event.message)
                yield sse_event(event_id, error)
    except LlmqError as exc:
        status, error = error_chunk(exc)
        yield sse_event(None, error)
    finally:
        metrics.requests.labels(model, status).inc()
    yield SSE_DONE


def _opening(delta: dict[str, Any], first: bool) -> dict[str, Any]:
    """``delta``, with the role where it is the stream's first."""
    return {"role": "assistant", **delta} if first else delta


class ToolStream:
    """A tool request's stream, as OpenAI sends one.

    A named call's arguments are the answer's text: its first delta carries the call's
    index, id, type and name with the first fragment, the next ones further fragments.
    A required call, and an auto answer that may turn out to be a call (one that begins
    like ``<tool_call>`` or a JSON object), are held and read whole at the end: one
    delta with every call (or, where none was made, the text). An auto answer that
    begins otherwise streams as text from the moment that is clear.
    """

    def __init__(self, use: ToolUse, job_id: str, *, resumed: bool) -> None:
        self._use = use
        self._job_id = job_id
        # A resumed stream's client already has what went out before: a named call's
        # announcement, or the start of an auto answer already streaming as text (a held
        # answer sends nothing before its end, so a stream resumed past it has ended).
        self._announced = resumed
        self._plain = resumed and use.mode == "auto"
        self._held: list[str] = []

    @property
    def streams_tokens(self) -> bool:
        """Whether each token goes out in its own delta (which may carry its logprobs)."""
        return self._use.mode == "named" or self._plain

    def on_token(self, text: str) -> dict[str, Any] | None:
        """The delta for a token's ``text``; None while it is held."""
        named = self._use.named()
        if named is not None:
            if self._announced:
                return {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}
            self._announced = True
            call = {"index": 0, "id": call_id(self._job_id, 0), "type": "function"}
            call["function"] = {"name": named.name, "arguments": text}
            return {"content": None, "tool_calls": [call]}
        if self._plain:
            return {"content": text}
        self._held.append(text)
        if self._use.mode == "auto" and not may_become_call("".join(self._held)):
            self._plain = True
            return {"content": "".join(self._held)}
        return None

    def on_final(self, text: str, finish_reason: str | None) -> tuple[dict[str, Any] | None, str]:
        """What is still to send at the end (None: nothing), and the finish reason."""
        reason = finish_reason or "stop"
        if self._plain:
            return None, reason
        if self._use.named() is not None and self._announced:
            return None, reason if reason == "length" else "tool_calls"
        message, reason = answer_message(self._job_id, text, finish_reason, self._use)
        if not message.get("tool_calls"):
            return {"content": text}, reason
        calls = [ToolCall.model_validate(call) for call in message["tool_calls"]]
        return {"content": message["content"], "tool_calls": tool_call_deltas(calls)}, reason


def chat_choice_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
) -> AsyncIterator[bytes]:
    """A chat completion of several choices as ``chat.completion.chunk`` events."""
    job_id = handle.job_id

    def piece(event: TokenEvent, _before: int, opening: bool) -> dict[str, Any]:
        delta: dict[str, Any] = {"content": event.text}
        if opening:
            delta = {"role": "assistant", **delta}
        return chunk(
            job_id=job_id, model=model, delta=delta, logprobs=event.logprobs, index=event.index
        )

    def finish(index: int, reason: str) -> dict[str, Any]:
        return chunk(job_id=job_id, model=model, delta={}, finish_reason=reason, index=index)

    def usage_chunk(usage: Usage) -> dict[str, Any]:
        return chunk(job_id=job_id, model=model, delta={}, usage=usage)

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
