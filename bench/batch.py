"""``llmq bench batch``: N short requests as one batch vs the same N sent one at a
time as interactive requests, and interactive TTFT idle vs while the batch runs."""

from __future__ import annotations

import io
import json
import statistics
import threading
import time
from typing import Any

from sqlalchemy import func, select

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
    on the idle worker and while the batch runs."""
    with bench_rig(settings, tier, concurrency=concurrency, prefill_prompts=False) as rig:
        for _ in range(3):  # warm the path
            queued_ttft_ms(rig, 4)
        idle = _ttfts(rig, samples, max_tokens)
        serial_s, serial_tokens = _serial(rig, requests, max_tokens)
        batch_s, batch_tokens, during = _batch(rig, requests, max_tokens, samples)
    idle_p50 = statistics.median(idle)
    during_p50 = statistics.median(during) if during else float("nan")
    return {
        "bench": "batch",
        "tier": tier.value,
        "requests": requests,
        "max_tokens": max_tokens,
        "batch_req_s": rounded(requests / batch_s),
        "batch_tok_s": rounded(batch_tokens / batch_s),
        "serial_req_s": rounded(requests / serial_s),
        "serial_tok_s": rounded(serial_tokens / serial_s),
        "speedup": rounded(serial_s / batch_s),
        "interactive_ttft_p50_ms": rounded(idle_p50),
        "interactive_ttft_p50_during_batch_ms": rounded(during_p50),
        "interactive_ttft_ratio": rounded(during_p50 / idle_p50),
        "interactive_samples_during_batch": len(during),
    }


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


def _batch(
    rig: Rig, requests: int, max_tokens: int, samples: int
) -> tuple[float, int, list[float]]:
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
    uploaded = store.create_file(
        client.sessions,
        io.BytesIO("\n".join(lines).encode()),
        filename="bench.jsonl",
        purpose=store.INPUT_PURPOSE,
        owner="bench",
        max_line_bytes=1 << 20,
    )
    batch = store.create_batch(
        client.sessions,
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        owner="bench",
    )
    feeder = threading.Thread(
        target=enqueue_batch, args=(client, batch.id), kwargs={"holder": "bench"}
    )
    feeder.start()
    during: list[float] = []
    with counted("as one batch", requests) as bar:
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
    return elapsed, int(tokens or 0), during
