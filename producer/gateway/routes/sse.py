"""The gateway's event-stream response: how a job's SSE bytes go out over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from schemas.timeouts import DEFAULT_TIMEOUTS

# Not a setting: when headers go out beside the first event is an implementation
# choice, not a bound a client relies on.
HEADERS_WAIT_S = 0.05
"""How long a stream's headers wait for its first event to go out with it."""
KEEPALIVE_S = DEFAULT_TIMEOUTS.sse_keepalive_s
"""Before its first event, a stream sends an SSE comment after this long of silence
(clients' read timeouts are often a minute or a few; a batch job may wait longer),
unless told (``settings.timeouts.sse_keepalive_s``)."""
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
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        super().__init__(content, media_type="text/event-stream", headers=headers)
        self._release = release
        self._keepalive_s = keepalive_s

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
                done, _ = await asyncio.wait({first}, timeout=self._keepalive_s)
                if not done:
                    await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            chunk = first.result()
        finally:
            first.cancel()  # a no-op once read: it stops the read only on a failure
        while chunk is not None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await anext(chunks, None)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
