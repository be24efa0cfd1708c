"""A job's stream as server-sent chunks, each choice apart: a text completion's (one
choice or several) and a chat completion's of several choices (``n``).

The job's log is read from its start, and events before the resume point are not
sent again: each choice's place (its characters so far, whether its first chunk went
out) is then known however far on a client resumes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway.serving.common import StreamRead, job_sse_events
from schemas.events import AnyEvent, FinalEvent, TokenEvent, Usage

Piece = Callable[[TokenEvent, int, bool], dict[str, Any]]
"""A token event's chunk, given the characters of its choice before it and whether it
is the choice's first."""
Finish = Callable[[int, str], dict[str, Any]]
"""The chunk that ends choice ``index`` with a finish reason."""
UsageChunk = Callable[[Usage], dict[str, Any]]


def choice_sse_events(
    handle: AsyncJobHandle,
    read: StreamRead,
    *,
    piece: Piece,
    finish: Finish,
    usage_chunk: UsageChunk,
) -> AsyncIterator[bytes]:
    """Chunks from ``read.from_seq`` on, then ``[DONE]``; each SSE id is
    ``<job id>.<seq>``.

    A choice ends with its own finish chunk: at its last token event where the job has
    several (the event carries its finish reason), else at the final event.
    """
    seen = _Seen()

    def chunks(event: AnyEvent, send: bool) -> list[dict[str, Any]]:
        if isinstance(event, TokenEvent):
            before, opening = seen.token(event)
            return _token_chunks(event, before, opening, piece, finish, send=send)
        if not send or not isinstance(event, FinalEvent):
            return []
        ends = [finish(index, reason) for index, reason in _unended(event, seen.ended)]
        return [*ends, usage_chunk(event.usage)] if read.include_usage else ends

    return job_sse_events(handle, read, read_from=0, chunks=chunks)


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
