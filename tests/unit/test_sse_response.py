"""The gateway's event-stream response: when its headers go out, and its release."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from producer.gateway.routes.sse import HEADERS_WAIT_S, KEEPALIVE_S, SseResponse

SCOPE: dict[str, Any] = {"type": "http", "asgi": {"spec_version": "2.4"}}


async def never_disconnects() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


def run(
    body: AsyncIterator[bytes],
    log: list[str],
    headers_sent: asyncio.Event | None = None,
    *,
    keepalive_s: float = KEEPALIVE_S,
) -> int:
    released = 0

    async def release() -> None:
        nonlocal released
        released += 1

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            log.append("headers")
            if headers_sent is not None:
                headers_sent.set()
        elif message["body"]:
            log.append(message["body"].decode())

    async def scenario() -> None:
        response = SseResponse(body, release=release, keepalive_s=keepalive_s)
        await response(SCOPE, never_disconnects, send)

    asyncio.run(asyncio.wait_for(scenario(), timeout=5))
    return released


def test_a_prompt_first_event_goes_out_with_the_headers() -> None:
    log: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        log.append("first made")
        yield b"one"
        yield b"two"

    assert run(body(), log) == 1
    assert log == ["first made", "headers", "one", "two"]


def test_headers_do_not_wait_long_for_a_job_still_queued() -> None:
    log: list[str] = []

    def scenario() -> int:
        headers_sent = asyncio.Event()

        async def body() -> AsyncIterator[bytes]:
            # Comes only once the headers are out: waiting for it would never end.
            await asyncio.wait_for(headers_sent.wait(), timeout=20 * HEADERS_WAIT_S)
            log.append("first made")
            yield b"one"

        return run(body(), log, headers_sent)

    assert scenario() == 1
    assert log == ["headers", "first made", "one"]


def test_a_stream_waiting_for_its_first_event_sends_keep_alive_comments() -> None:
    log: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.3)  # queued
        yield b"one"
        yield b"two"

    assert run(body(), log, keepalive_s=0.05) == 1
    assert log[0] == "headers"
    keepalives = log[1 : log.index("one")]
    assert len(keepalives) >= 2 and set(keepalives) == {": keep-alive\n\n"}
    assert log[-2:] == ["one", "two"]
