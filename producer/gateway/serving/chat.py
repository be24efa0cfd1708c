"""Serving a chat completion: the request becomes a job, and the job's stream becomes
``chat.completion.chunk`` events (one choice, or several each apart) or a whole
``chat.completion``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.protocol.chat import (
    ChatCompletionRequest,
    answer_message,
    chunk,
    completion,
    tool_call_deltas,
)
from producer.gateway.serving.choice_stream import choice_sse_events
from producer.gateway.serving.common import (
    Answer,
    CallOptions,
    JobServing,
    StreamRead,
    answer_fields,
    job_sse_events,
)
from schemas.events import AnyEvent, FinalEvent, TokenEvent, Usage
from schemas.jobs import JobResult
from schemas.settings import Settings
from schemas.tools import ToolCall, ToolUse, call_id, may_become_call


@dataclass
class ChatServing:
    """``POST /v1/chat/completions`` once the route has read the call."""

    jobs: JobServing

    async def create(
        self, body: ChatCompletionRequest, call: CallOptions, *, started: float
    ) -> Answer:
        """The call's answer: streamed when the body asks, else whole. ``started`` (a
        ``time.perf_counter()``) is when the call arrived, for the first-token metric.

        Raises ``GatewayError`` (404 for an unknown model, and what opening the job
        raises), ``InvalidRequest`` past the settings' bounds, and the client's errors.
        """
        # Several choices stream each apart (choice_stream); a tool answer is one.
        events = (
            chat_choice_events if body.n > 1 else partial(chat_sse_events, tool_use=body.tool_use())
        )

        def whole(result: JobResult) -> dict[str, Any]:
            return completion(
                answer_fields(result, body.model),
                logprobs=(result.logprobs or []) if body.logprobs else None,
                tool_use=body.tool_use(),
            )

        def check_bounds(settings: Settings) -> None:
            body.check_bounds(
                max_messages=settings.max_messages, max_message_chars=settings.max_message_chars
            )

        return await self.jobs.answer(
            body, call, started=started, check_bounds=check_bounds, events=events, whole=whole
        )


def chat_sse_events(
    handle: AsyncJobHandle, read: StreamRead, *, tool_use: ToolUse | None = None
) -> AsyncIterator[bytes]:
    """Chunks from ``read.from_seq`` on, then ``[DONE]``; each SSE id is
    ``<job id>.<seq>``.

    With ``tool_use``, the answer's calls go out as ``delta.tool_calls`` (``ToolStream``).
    """
    job_id = handle.job_id
    model = read.model
    resumed = read.from_seq != 0
    role_pending = not resumed
    tools = ToolStream(tool_use, job_id, resumed=resumed) if tool_use is not None else None

    def chunks(event: AnyEvent, _send: bool) -> list[dict[str, Any]]:
        nonlocal role_pending
        if isinstance(event, TokenEvent):
            delta: dict[str, Any] | None = {"content": event.text}
            if tools is not None:
                delta = tools.on_token(event.text)
            if delta is None:
                return []  # held: it may be part of a call
            delta, role_pending = _opening(delta, role_pending), False
            logprobs = event.logprobs if tools is None or tools.streams_tokens else None
            return [chunk(job_id=job_id, model=model, delta=delta, logprobs=logprobs)]
        if not isinstance(event, FinalEvent):
            return []
        rest, reason = (
            tools.on_final(event.text, event.finish_reason)
            if tools is not None
            else (None, event.finish_reason or "stop")
        )
        out = []
        if rest is not None:
            rest, role_pending = _opening(rest, role_pending), False
            out.append(chunk(job_id=job_id, model=model, delta=rest))
        out.append(chunk(job_id=job_id, model=model, delta={}, finish_reason=reason))
        if read.include_usage:
            out.append(chunk(job_id=job_id, model=model, delta={}, usage=event.usage))
        return out

    return job_sse_events(handle, read, read_from=read.from_seq, chunks=chunks)


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


def chat_choice_events(handle: AsyncJobHandle, read: StreamRead) -> AsyncIterator[bytes]:
    """A chat completion of several choices as ``chat.completion.chunk`` events."""
    job_id = handle.job_id
    model = read.model

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

    return choice_sse_events(handle, read, piece=piece, finish=finish, usage_chunk=usage_chunk)
