"""A job's stream events as OpenAI ``chat.completion.chunk`` server-sent events."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from producer.aio import AsyncJobHandle
from producer.gateway import openai_models as oai
from producer.gateway.errors import http_error_for
from producer.gateway.metrics import GatewayMetrics
from schemas.errors import LlmqError, job_ended
from schemas.events import ErrorEvent, FinalEvent, TokenEvent
from schemas.tools import ToolCall, ToolUse, call_id, may_become_call


async def sse_events(
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
                chunk = oai.chunk(job_id=job_id, model=model, delta=delta, logprobs=logprobs)
                yield encode(event_id, chunk)
            elif isinstance(event, FinalEvent):
                rest, reason = (
                    tools.on_final(event.text, event.finish_reason)
                    if tools is not None
                    else (None, event.finish_reason or "stop")
                )
                if rest is not None:
                    rest, role_pending = _opening(rest, role_pending), False
                    yield encode(event_id, oai.chunk(job_id=job_id, model=model, delta=rest))
                yield encode(
                    event_id,
                    oai.chunk(job_id=job_id, model=model, delta={}, finish_reason=reason),
                )
                if include_usage:
                    usage = oai.chunk(job_id=job_id, model=model, delta={}, usage=event.usage)
                    yield encode(event_id, usage)
            elif isinstance(event, ErrorEvent):
                ended = job_ended(job_id, event.message, event.status)
                status, error = error_chunk(ended, message=event.message)
                yield encode(event_id, error)
    except LlmqError as exc:
        status, error = error_chunk(exc)
        yield encode(None, error)
    finally:
        metrics.requests.labels(model, status).inc()
    yield b"data: [DONE]\n\n"


def error_chunk(exc: LlmqError, *, message: str | None = None) -> tuple[str, dict[str, Any]]:
    """The HTTP status a stream that ended in ``exc`` is counted under, and the error
    body it sends in OpenAI's format (``message``, else the error's own text)."""
    http = http_error_for(exc)
    text = str(exc) if message is None else message
    return str(http.status), oai.error_body(text, kind=http.kind, code=http.code)


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
        message, reason = oai.answer_message(self._job_id, text, finish_reason, self._use)
        if not message.get("tool_calls"):
            return {"content": text}, reason
        calls = [ToolCall.model_validate(call) for call in message["tool_calls"]]
        return {"content": message["content"], "tool_calls": oai.tool_call_deltas(calls)}, reason


def encode(event_id: str | None, payload: dict[str, Any]) -> bytes:
    """One SSE event."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


HEADERS_WAIT_S = 0.05
"""How long a stream's headers wait for its first event to go out with it."""
KEEPALIVE_S = 15.0
"""Before its first event, a stream sends an SSE comment after this long of silence
(clients' read timeouts are often a minute or a few; a batch job may wait longer)."""
KEEPALIVE = b": keep-alive\n\n"


class SseResponse(StreamingResponse):
    """The gateway's event stream: headers go out with the first event, and what the
    stream held (its slot, its early subscription) is given back however it ends.

    Sending the headers at once would wake the client to read them just as the worker
    hands the job to its engine, on a small host on the same core; with the first event
    they cost nothing there. Headers wait at most ``HEADERS_WAIT_S``, so a job that
    waits in its queue is still answered at once. ``release`` runs after the response
    returns, raises or is cancelled (the client went away), which a ``finally`` in the
    body generator alone cannot promise: a generator cancelled before its first step
    never runs its ``finally``.
    """

    def __init__(
        self,
        content: AsyncIterable[bytes],
        *,
        release: Callable[[], Awaitable[None]],
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._release()

    async def stream_response(self, send: Send) -> None:
        chunks = aiter(self.body_iterator)
        first = asyncio.ensure_future(anext(chunks, None))
        try:
            await asyncio.wait({first}, timeout=HEADERS_WAIT_S)
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            # A job may wait long in its queue: a comment now and then keeps clients
            # and proxies from taking the silence for a dead connection.
            while not first.done():
                done, _ = await asyncio.wait({first}, timeout=KEEPALIVE_S)
                if not done:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            chunk = first.result()
        finally:
            first.cancel()  # a no-op once read: it stops the read only on a failure
        while chunk is not None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await anext(chunks, None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
