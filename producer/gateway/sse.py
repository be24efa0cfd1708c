"""A job's stream events as OpenAI ``chat.completion.chunk`` server-sent events."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from producer.aio import AsyncJobHandle
from producer.gateway import openai_models as oai
from producer.gateway.errors import http_error_for
from producer.gateway.metrics import GatewayMetrics
from schemas.errors import LlmqError, job_ended
from schemas.events import ErrorEvent, FinalEvent, TokenEvent


async def sse_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
) -> AsyncIterator[bytes]:
    """Chunks from ``from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``."""
    job_id = handle.job_id
    first = from_seq == 0
    status = "200"
    try:
        async for event in handle.events(from_seq=from_seq, timeout=timeout):
            event_id = f"{job_id}.{event.seq}"
            if isinstance(event, TokenEvent):
                delta: dict[str, Any] = {"content": event.text}
                if first:
                    delta["role"] = "assistant"
                    metrics.ttft.labels(model).observe(time.perf_counter() - started)
                    first = False
                yield encode(event_id, oai.chunk(job_id=job_id, model=model, delta=delta))
            elif isinstance(event, FinalEvent):
                reason = event.finish_reason or "stop"
                yield encode(
                    event_id,
                    oai.chunk(job_id=job_id, model=model, delta={}, finish_reason=reason),
                )
                if include_usage:
                    usage = oai.chunk(job_id=job_id, model=model, delta={}, usage=event.usage)
                    yield encode(event_id, usage)
            elif isinstance(event, ErrorEvent):
                http = http_error_for(job_ended(job_id, event.message, event.status))
                status = str(http.status)
                error = oai.error_body(event.message, kind=http.kind, code=http.code)
                yield encode(event_id, error)
    except LlmqError as exc:
        http = http_error_for(exc)
        status = str(http.status)
        yield encode(None, oai.error_body(str(exc), kind=http.kind, code=http.code))
    finally:
        metrics.requests.labels(model, status).inc()
    yield b"data: [DONE]\n\n"


def encode(event_id: str | None, payload: dict[str, Any]) -> bytes:
    """One SSE event."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()
