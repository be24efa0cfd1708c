"""``llmq bench submit-order``: what the order of a new job's message and its row costs
the first token, on the job database at hand.

A new interactive job's message carries its request, so the producer pushes it first
and writes the row while the worker starts the engine (``producer.client``); a job
with an idempotency key writes its row first (a replay must push nothing). The two
orders run in one stack, one worker, alternating request by request: the same
request with no key (message first) and with a fresh key (row first). On a local
database the insert is a fraction of a millisecond of CPU on a busy core; on one
reached over a network it is several round trips.

With ``--row-delay`` both sides send the message first, and what differs is when the
row is written: at once, or ``row_write_delay_ms`` later (the default), after the
worker's start on the engine. Each side has its own client (or its own gateway).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from sqlalchemy.engine import make_url

from bench.gateway import gateway_process, gateway_ttft_ms
from bench.harness import Rig, bench_rig, paired_samples, queued_sample, request_fields, rounded
from bench.redis_server import free_port
from producer.client import Client
from producer.gateway.keys import create_key
from schemas.percentiles import median, percentile
from schemas.queues import Tier
from schemas.settings import Settings

# A sampler: an idempotency key (None: none) to one sample's first-token time.
Sampler = Callable[[str | None], float]


def run_submit_order(
    settings: Settings,
    *,
    tier: Tier,
    samples: int,
    max_tokens: int,
    gateway: bool,
    port: int,
    row_delay: bool = False,
) -> dict[str, Any]:
    """``samples`` pairs, alternating which side goes first; p50s, p99s and the saving.

    With ``gateway``, every request goes through ``llmq gateway`` (the key as the
    ``Idempotency-Key`` header), else through the Python client. With ``row_delay``,
    the row written at once against the row written after ``row_write_delay_ms``.
    """
    with bench_rig(settings, tier, prefill_prompts=False) as rig:
        database = make_url(rig.settings.database_url).get_backend_name()
        if row_delay:
            return _row_delay(rig, samples, max_tokens, gateway=gateway, port=port) | {
                "database": database
            }
        with _sampler(rig, max_tokens, gateway=gateway, port=port) as sample:
            message_first, row_first = paired_samples(
                lambda _index: sample(None),
                lambda _index: sample(uuid.uuid4().hex),
                samples=samples,
                label="message first and row first, alternating",
                alternate=True,
            )
    return {
        "bench": "submit-order",
        "tier": tier.value,
        "database": database,
        "via": "gateway" if gateway else "client",
        "n": samples,
        "max_tokens": max_tokens,
        **_sides_report(("row_first", row_first), ("message_first", message_first)),
    }


def _row_delay(
    rig: Rig, samples: int, max_tokens: int, *, gateway: bool, port: int
) -> dict[str, Any]:
    delay_ms = rig.settings.row_write_delay_ms
    at_once_settings = rig.settings.model_copy(update={"row_write_delay_ms": 0.0})
    with (
        Client(at_once_settings) as at_once_client,
        _sampler(
            Rig(at_once_settings, at_once_client, rig.tier),
            max_tokens,
            gateway=gateway,
            port=free_port(),
            env={"LLMQ_ROW_WRITE_DELAY_MS": "0"},
        ) as at_once,
        _sampler(
            rig,
            max_tokens,
            gateway=gateway,
            port=port,
            env={"LLMQ_ROW_WRITE_DELAY_MS": str(delay_ms)},
        ) as delayed,
    ):
        row_at_once, row_delayed = paired_samples(
            lambda _index: at_once(None),
            lambda _index: delayed(None),
            samples=samples,
            label=f"row at once and row after {delay_ms:g} ms, alternating",
            alternate=True,
        )
    return {
        "bench": "submit-order",
        "compare": "row-delay",
        "tier": rig.tier.value,
        "via": "gateway" if gateway else "client",
        "n": samples,
        "max_tokens": max_tokens,
        "row_write_delay_ms": delay_ms,
        **_sides_report(("row_at_once", row_at_once), ("row_delayed", row_delayed)),
    }


def _sides_report(
    before: tuple[str, list[float]], after: tuple[str, list[float]]
) -> dict[str, Any]:
    """Each side's first-token p50 and p99 and samples, by its name, and what ``after``
    saved over ``before``, paired sample by sample."""
    saved = [then - now for then, now in zip(before[1], after[1], strict=True)]
    percentiles: dict[str, Any] = {}
    for name, values in (before, after):
        percentiles[f"{name}_ttft_ms_p50"] = rounded(median(values))
        percentiles[f"{name}_ttft_ms_p99"] = rounded(percentile(values, 99))
    return {
        **percentiles,
        "saved_ms_paired_p50": rounded(median(saved)),
        **{
            f"{name}_ttft_samples_ms": [rounded(x) for x in values]
            for name, values in (before, after)
        },
    }


@contextlib.contextmanager
def _sampler(
    rig: Rig,
    max_tokens: int,
    *,
    gateway: bool,
    port: int,
    env: dict[str, str] | None = None,
) -> Iterator[Sampler]:
    """Samples through ``rig``'s client, or through a gateway of its own started with
    ``env`` (settings of its own)."""
    if not gateway:
        request = request_fields(max_tokens)
        yield lambda key: queued_sample(rig, request, idempotency_key=key)[0]
        return
    secret = create_key(rig.client.sessions, "bench")[1]
    with (
        gateway_process(rig.settings, port, env=env) as url,
        httpx.Client(base_url=url) as http,
    ):
        auth = {"Authorization": f"Bearer {secret}"}

        def through_gateway(key: str | None) -> float:
            headers = auth if key is None else {**auth, "Idempotency-Key": key}
            return gateway_ttft_ms(http, headers, rig, max_tokens)

        yield through_gateway
