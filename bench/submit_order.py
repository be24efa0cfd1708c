"""``llmq bench submit-order``: what writing a new job's row before its message costs
the first token, on the job database at hand.

A new interactive job's message carries its request, so the producer pushes it first
and writes the row while the worker starts the engine (``producer.client``); a job
with an idempotency key writes its row first (a replay must push nothing). The two
orders run in one stack, one worker, alternating request by request: the same
request with no key (message first) and with a fresh key (row first). On a local
database the insert is a fraction of a millisecond of CPU on a busy core; on one
reached over a network it is several round trips.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy.engine import make_url

from bench.harness import (
    Rig,
    bench_rig,
    median,
    paired_samples,
    percentile,
    request_fields,
    rounded,
)
from schemas.queues import Tier
from schemas.settings import Settings


def run_submit_order(
    settings: Settings, *, tier: Tier, samples: int, max_tokens: int
) -> dict[str, Any]:
    """``samples`` pairs, alternating which order goes first; p50s, p99s and the saving."""
    with bench_rig(settings, tier, prefill_prompts=False) as rig:
        database = make_url(rig.settings.database_url).get_backend_name()
        message_first, row_first = paired_samples(
            lambda _index: ttft_ms(rig, max_tokens, idempotency_key=None),
            lambda _index: ttft_ms(rig, max_tokens, idempotency_key=uuid.uuid4().hex),
            samples=samples,
            label="message first and row first, alternating",
            alternate=True,
        )
    saved = [row - message for message, row in zip(message_first, row_first, strict=True)]
    return {
        "bench": "submit-order",
        "tier": tier.value,
        "database": database,
        "n": samples,
        "max_tokens": max_tokens,
        "message_first_ttft_ms_p50": rounded(median(message_first)),
        "message_first_ttft_ms_p99": rounded(percentile(message_first, 99)),
        "row_first_ttft_ms_p50": rounded(median(row_first)),
        "row_first_ttft_ms_p99": rounded(percentile(row_first, 99)),
        "saved_ms_paired_p50": rounded(median(saved)),
        "message_first_ttft_samples_ms": [rounded(x) for x in message_first],
        "row_first_ttft_samples_ms": [rounded(x) for x in row_first],
    }


def ttft_ms(rig: Rig, max_tokens: int, *, idempotency_key: str | None) -> float:
    """Time to first text of one streamed job, read as the gateway reads it; drained."""
    started = time.perf_counter()
    handle = rig.client.submit(
        request_fields(max_tokens),
        tier=rig.tier,
        subscribe=True,
        idempotency_key=idempotency_key,
    )
    for _chunk in handle.stream(timeout=300):
        ttft = (time.perf_counter() - started) * 1000.0
        handle.result(timeout=300)  # the next sample starts on an idle engine
        return ttft
    raise RuntimeError("the job produced no text")
