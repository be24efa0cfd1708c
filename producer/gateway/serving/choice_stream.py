"""A job's stream as server-sent chunks, each choice apart: a text completion's (one
choice or several) and a chat completion's of several choices (``n``).

The job's log is read from its start, and events before the resume point are not
sent again: each choice's place (its characters so far, whether its first chunk went
out) is then known however far on a client resumes.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.protocol.common import SSE_DONE, sse_event
from producer.gateway.serving.common import error_chunk
from schemas.errors import LlmqError, job_ended
from schemas.events import ErrorEvent, FinalEvent, TokenEvent, Usage

Piece = Callable[[TokenEvent, int, bool], dict[str, Any]]
"""A token event's chunk, given the characters of its choice before it and whether it
is the choice's first."""
Finish = Callable[[int, str], dict[str, Any]]
"""The chunk that ends choice ``index`` with a finish reason."""
UsageChunk = Callable[[Usage], dict[str, Any]]


async def choice_sse_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
    piece: Piece,
    finish: Finish,
    usage_chunk: UsageChunk,
) -> AsyncIterator[bytes]:
    """Chunks from ``from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``.

    A choice ends with its own finish chunk: at its last token event where the job has
    several (the event carries its finish reason), else at the final event.
    """
    job_id = handle.job_id
    seen = _Seen()
    first = from_seq == 0
    status = "200"
    try:
        async for event in handle.events(from_seq=0, timeout=timeout):
            event_id = f"{job_id}.{event.seq}"
            send = event.seq >= from_seq
            if isinstance(event, TokenEvent):
                before, opening = seen.token(event)
                if send and first:
                    metrics.ttft.labels(model).observe(time.perf_counter() - started)
                    first = False
                for payload in _token_chunks(event, before, opening, piece, finish, send=send):
                    yield sse_event(event_id, payload)
            elif not send:
                continue
            elif isinstance(event, FinalEvent):
                for index, reason in _unended(event, seen.ended):
                    yield sse_event(event_id, finish(index, reason))
                if include_usage:
                    yield sse_event(event_id, usage_chunk(event.usage))
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


class _Seen:
    """Each choice's characters so far, and the choices whose last token went by."""

    def __init__(self) -> None:
        self.chars: dict[int, int] = {}
        self.ended: set[int] = set()

    def token(self, event: TokenEvent) -> tuple[int, bool]:
        """Count ``event``; the characters of its choice before it, and whether it is
        the choice's first."""
        before = self.chars.get(event.index)
        self.chars[event.index] = (before or 0) + len(event.text)
        if event.finish_reason is not None:
            self.ended.add(event.index)
        return before or 0, before is None


def _token_chunks(
    event: TokenEvent, before: int, opening: bool, piece: Piece, finish: Finish, *, send: bool
) -> list[dict[str, Any]]:
    """What a token event sends: its piece, and its choice's end where it is the last."""
    if not send:
        return []
    chunks = [piece(event, before, opening)]
    if event.finish_reason is not None:
        chunks.append(finish(event.index, event.finish_reason))
    return chunks


def _unended(event: FinalEvent, ended: set[int]) -> list[tuple[int, str]]:
    """The choices a final event ends: the one choice of most jobs; of several, any
    whose last token event did not (none, from a worker of this version)."""
    if event.choices is None:
        return [(0, event.finish_reason or "stop")]
    return [
        (choice.index, choice.finish_reason or "stop")
        for choice in event.choices
        if choice.index not in ended
    ]
