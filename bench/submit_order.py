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

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from bench.gateway import gateway_process, gateway_ttft_ms
from bench.harness import (
    Rig,
    bench_rig,
    median,
    paired_samples,
    percentile,
    queued_sample,
    request_fields,
    rounded,
)
from producer.gateway.keys import create_key
from schemas.queues import Tier
from schemas.settings import Settings


def run_submit_order(
    settings: Settings, *, tier: Tier, samples: int, max_tokens: int, gateway: bool, port: int
) -> dict[str, Any]:
    """``samples`` pairs, alternating which order goes first; p50s, p99s and the saving.

    With ``gateway``, every request goes through ``llmq gateway`` (the key as the
    ``Idempotency-Key`` header), else through the Python client.
    """
    with (
        bench_rig(settings, tier, prefill_prompts=False) as rig,
        _sampler(rig, max_tokens, gateway=gateway, port=port) as sample,
    ):
        database = make_url(rig.settings.database_url).get_backend_name()
        message_first, row_first = paired_samples(
            lambda _index: sample(None),
            lambda _index: sample(uuid.uuid4().hex),
            samples=samples,
            label="message first and row first, alternating",
            alternate=True,
        )
    saved = [row - message for message, row in zip(message_first, row_first, strict=True)]
    return {
        "bench": "submit-order",
        "tier": tier.value,
        "database": database,
        "via": "gateway" if gateway else "client",
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


@contextlib.contextmanager
def _sampler(
    rig: Rig, max_tokens: int, *, gateway: bool, port: int
) -> Iterator[Callable[[str | None], float]]:
    """A function from an idempotency key (None: none) to one sample's first-token time."""
    if not gateway:
        request = request_fields(max_tokens)
        yield lambda key: queued_sample(rig, request, idempotency_key=key)[0]
        return
    secret = create_key(rig.client.sessions, "bench")[1]
    with gateway_process(rig.settings, port) as url, httpx.Client(base_url=url) as http:
        auth = {"Authorization": f"Bearer {secret}"}

        def through_gateway(key: str | None) -> float:
            headers = auth if key is None else {**auth, "Idempotency-Key": key}
            return gateway_ttft_ms(http, headers, rig, max_tokens)

        yield through_gateway
