"""``llmq bench batch``: N short requests as one batch vs the same N sent one at a
time as interactive requests, and interactive TTFT idle vs while the batch runs."""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from bench.goodput import wilson_interval
from bench.harness import (
    SETTLE_S,
    Rig,
    bench_rig,
    counted,
    queued_sample,
    queued_ttft_ms,
    rounded,
)
from producer.batches import store
from producer.batches.enqueue import enqueue_batch
from producer.batches.status import BatchStatus
from schemas.percentiles import median
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from schemas.tables import Job

PROMPT = "Give a one-word answer: a colour you like (request {index})."


def _request(index: int, max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": PROMPT.format(index=index)}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def run_batch(
    settings: Settings,
    *,
    tier: Tier,
    requests: int,
    max_tokens: int,
    samples: int,
    concurrency: int,
) -> dict[str, Any]:
    """Throughput of ``requests`` requests as one batch and one at a time (interactive),
    on one warm worker, same run; plus interactive TTFT p50 over ``samples`` requests
    on the idle worker and while a second, identical batch runs.

    The batch runs twice. First alone, as a nightly batch on a quiet worker (after the
    tier's ``interactive_hold_s``, so the one-at-a-time requests before it no longer
    shrink its share): that pass gives ``speedup``, how full the batch keeps the engine.
    Then with the interactive samples beside it: its share shrinks while they run, as
    designed, and ``speedup_while_interactive`` says what that costs the batch.
    """
    hold_s = settings.tier(tier).interactive_hold_s
    with bench_rig(settings, tier, concurrency=concurrency, prefill_prompts=False) as rig:
        for _ in range(3):  # warm the path
            queued_ttft_ms(rig, 4)
        idle = _ttfts(rig, samples, max_tokens)
        serial_s, serial_tokens = _serial(rig, requests, max_tokens)
        time.sleep(hold_s + HOLD_MARGIN_S)
        alone = _batch(rig, requests, max_tokens, 0, label="as one batch, nobody waiting")
        shared = _batch(rig, requests, max_tokens, samples, label="as one batch, people waiting")
    idle_p50 = median(idle)
    during_p50 = median(shared.during) if shared.during else float("nan")
    slo_ms = settings.tier(tier).interactive_ttft_slo_ms
    within = sum(ttft <= slo_ms for ttft in shared.during)
    return {
        "bench": "batch",
        "tier": tier.value,
        "requests": requests,
        "max_tokens": max_tokens,
        "batch_req_s": rounded(requests / alone.seconds),
        "batch_tok_s": rounded(alone.tokens / alone.seconds),
        "serial_req_s": rounded(requests / serial_s),
        "serial_tok_s": rounded(serial_tokens / serial_s),
        "speedup": rounded(serial_s / alone.seconds),
        "batch_req_s_while_interactive": rounded(requests / shared.seconds),
        "speedup_while_interactive": rounded(serial_s / shared.seconds),
        "interactive_ttft_p50_ms": rounded(idle_p50),
        "interactive_ttft_p50_during_batch_ms": rounded(during_p50),
        "interactive_ttft_ratio": rounded(during_p50 / idle_p50),
        "interactive_samples_during_batch": len(shared.during),
        # Both sides of the share: people inside their first-token SLO, and what the
        # batch got beside them.
        "slo_ttft_ms": slo_ms,
        "interactive_slo_attainment_during_batch": (
            round(within / len(shared.during), 4) if shared.during else None
        ),
        "interactive_slo_attainment_ci95": wilson_interval(within, len(shared.during)),
        "batch_tok_s_while_interactive": rounded(shared.tokens / shared.seconds),
    }


# Past the hold, the worker's next received message restores batch's whole share.
HOLD_MARGIN_S = 0.5


@dataclass(frozen=True)
class BatchPass:
    """One batch of the bench's requests, start to last result."""

    seconds: float
    tokens: int
    during: list[float]
    """Interactive TTFTs sampled while it ran."""


def _ttfts(rig: Rig, samples: int, max_tokens: int) -> list[float]:
    values = []
    for _ in counted("interactive TTFT, idle worker", samples).track(range(samples)):
        time.sleep(SETTLE_S)
        values.append(queued_ttft_ms(rig, max_tokens))
    return values


def _serial(rig: Rig, requests: int, max_tokens: int) -> tuple[float, int]:
    tokens = 0
    started = time.perf_counter()
    for index in counted("one at a time", requests).track(range(requests)):
        _ttft, result = queued_sample(rig, _request(index, max_tokens))
        tokens += result.usage.completion_tokens
    return time.perf_counter() - started, tokens


def _batch(rig: Rig, requests: int, max_tokens: int, samples: int, *, label: str) -> BatchPass:
    client = rig.client
    lines = [
        json.dumps(
            {
                "custom_id": f"r{index}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": rig.tier.value, **_request(index, max_tokens)},
            }
        )
        for index in range(requests)
    ]
    started = time.perf_counter()
    batch = store.upload_batch(
        client.sessions,
        io.BytesIO("\n".join(lines).encode()),
        filename="bench.jsonl",
        owner="bench",
        max_line_bytes=1 << 20,
    )
    feeder = threading.Thread(
        target=enqueue_batch, args=(client, batch.id), kwargs={"holder": "bench"}
    )
    feeder.start()
    during: list[float] = []
    with counted(label, requests) as bar:
        while True:
            row = store.refresh_batch(client.sessions, batch.id, cancel_job=client.cancel)
            bar.update(row.completed + row.failed, note=f"{len(during)} interactive samples")
            if BatchStatus(row.status).is_final:
                break
            if len(during) < samples and row.enqueued > 0:
                time.sleep(SETTLE_S)
                during.append(queued_ttft_ms(rig, max_tokens))
            else:
                time.sleep(0.05)
    elapsed = time.perf_counter() - started
    feeder.join()
    if row.status != BatchStatus.COMPLETED:
        raise RuntimeError(f"the benchmark's batch ended {row.status}")
    with client.sessions() as session:
        tokens = session.scalar(
            select(func.coalesce(func.sum(Job.completion_tokens), 0)).where(
                Job.batch_id == batch.id, Job.priority == Priority.BATCH.value
            )
        )
    return BatchPass(elapsed, int(tokens or 0), during)
