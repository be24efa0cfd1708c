"""``llmq bench priority``: interactive TTFT on an idle worker vs one flooded with batch."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from bench.harness import (
    PAIRED_WARMUP_ROUNDS,
    SETTLE_S,
    Rig,
    bench_rig,
    counted,
    median,
    percentile,
    queued_sample,
    request_fields,
    rounded,
    step,
)
from bench.spread import ratio_interval
from producer.client import Client
from producer.enqueue import withdraw_jobs
from schemas.jobs import JobResult, JobStatus
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from schemas.tables import Job, utcnow
from workers.capacity import slot_shares

MIN_P99_SAMPLES = 100
ARRIVAL_JITTER_S = 0.25
"""Each interactive request waits SETTLE_S plus a random part of this before it is sent.

A request sent a fixed pause after the previous one's last token, itself the end of an
engine step, lands at the same point of the batch's steps every time: where a step
lasts about the pause (50 ms on a 2-core CPU), just after one began, and it waits out
nearly all of it, every time. People's requests come at random moments, so each waits
out a random part of a step; a window of several steps (a CPU step is 40-150 ms, a GPU
one about 10) spreads the arrivals evenly over a step's length."""
BATCH_PROMPT = "Summarise this ticket in one line: my parcel arrived late and damaged."


def run_priority(
    settings: Settings,
    *,
    tier: Tier,
    samples: int,
    batch_jobs: int,
    concurrency: int,
    max_tokens: int,
    batch_max_tokens: int,
    seed: int = 7,
    arrival_jitter_s: float = ARRIVAL_JITTER_S,
) -> dict[str, Any]:
    """Interactive TTFT, ``samples`` times on an idle worker, then again with
    ``batch_jobs`` batch jobs queued and the worker busy with them; one worker, one run.

    Also counts the batch jobs that finished while the loaded samples ran: batch work
    must progress even while interactive work comes first. A p99 needs 100 samples or
    more: fewer are refused. Requests are sent at random moments (``seed``), not in
    step with the engine (``ARRIVAL_JITTER_S``; 0: a fixed pause, in step).
    """
    if samples < MIN_P99_SAMPLES:
        raise ValueError(f"a p99 needs at least {MIN_P99_SAMPLES} samples, not {samples}")
    shares = slot_shares(settings.tier(tier), concurrency)
    pauses = arrival_pauses(random.Random(seed), arrival_jitter_s)
    with bench_rig(settings, tier, concurrency=concurrency, prefill_prompts=False) as rig:
        idle, idle_steps = _interactive_samples(
            rig,
            samples,
            max_tokens,
            pauses,
            warmup=PAIRED_WARMUP_ROUNDS,
            label="idle worker",
        )
        backlog = [
            rig.client.submit(_batch_request(i, batch_max_tokens), tier=tier, priority="batch")
            for i in counted("queueing the batch flood", batch_jobs, unit="jobs").track(
                range(batch_jobs)
            )
        ]
        with step(f"waiting for the worker to fill its {shares.batch_max} batch slots"):
            _wait_until_batch_fills(rig.client, shares.batch_max)
        started = utcnow()
        loaded, _loaded_steps = _interactive_samples(
            rig, samples, max_tokens, pauses, warmup=0, label="worker busy with the flood"
        )
        batch_during = _batch_done_since(rig.client, started)
        queued_after = sum(rig.client.status(h.job_id) is JobStatus.QUEUED for h in backlog)
        # The rest is not part of the figure. Its messages are taken off the queue too:
        # left there, they would be popped (and skipped) by the next bench's worker on
        # the same broker, its rows gone with this bench's database.
        withdrawn = withdraw_jobs(
            rig.client.redis, queue_name(tier, Priority.BATCH), [h.job_id for h in backlog]
        )
        for handle in backlog:
            handle.cancel()
    idle_p99, loaded_p99 = percentile(idle, 99), percentile(loaded, 99)
    step_ms = median(idle_steps) if idle_steps else None
    return {
        "bench": "priority",
        "tier": tier.value,
        "n": samples,
        "slots": shares.slots,
        "batch_max_slots": shares.batch_max,
        "batch_jobs": batch_jobs,
        "arrival_jitter_s": arrival_jitter_s,
        "idle_ttft_p50_ms": rounded(median(idle)),
        "loaded_ttft_p50_ms": rounded(median(loaded)),
        "idle_ttft_p95_ms": rounded(percentile(idle, 95)),
        "loaded_ttft_p95_ms": rounded(percentile(loaded, 95)),
        "idle_ttft_p99_ms": rounded(idle_p99),
        "loaded_ttft_p99_ms": rounded(loaded_p99),
        "ratio": rounded(loaded_p99 / idle_p99),
        # A p99 of 100 samples is the second-slowest: resampled, it moves a lot.
        "ratio_ci95": ratio_interval(idle, loaded, 99),
        "idle_step_ms_p50": None if step_ms is None else rounded(step_ms),
        "one_step_wait_ratio_model": (
            None if step_ms is None else rounded(one_step_wait_ratio(idle, step_ms))
        ),
        "batch_completed_during": batch_during,
        "batch_still_queued_after": queued_after,
        "batch_messages_withdrawn": withdrawn,
    }


def _batch_request(index: int, max_tokens: int) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": f"{BATCH_PROMPT} (ticket {index})"}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def one_step_wait_ratio(idle_ttft_ms: list[float], step_ms: float) -> float:
    """A model, not a measurement: the loaded/idle p99 ratio if running batch work cost
    an interactive request nothing but the wait for the engine step in progress.

    The engine cannot stop a step: a request that arrives while a batch sequence's step
    runs waits out what is left of it, anything from nothing to one whole step. Of 100
    arrivals at random moments the second-longest wait (a p99 of 100) is about 0.98 of
    a step, so the loaded p99 is about the idle median plus that.
    """
    return (median(idle_ttft_ms) + 0.98 * step_ms) / percentile(idle_ttft_ms, 99)


def arrival_pauses(rng: random.Random, jitter_s: float = ARRIVAL_JITTER_S) -> Iterator[float]:
    """The pause before each interactive request: SETTLE_S (the last job's tail work
    done) plus a random part of ``jitter_s``, so it lands at a random point of whatever
    engine step is running."""
    while True:
        yield SETTLE_S + rng.uniform(0.0, jitter_s)


def decode_step_ms(result: JobResult) -> float | None:
    """The worker's mean time per token after the first (one engine step each, for a
    request alone in the engine); None for an answer of one token."""
    tokens, timings = result.usage.completion_tokens, result.timings
    if tokens < 2 or timings.ttft_ms is None:
        return None
    return (timings.total_ms - timings.ttft_ms) / (tokens - 1)


def _interactive_samples(
    rig: Rig,
    samples: int,
    max_tokens: int,
    pauses: Iterator[float],
    *,
    warmup: int,
    label: str,
) -> tuple[list[float], list[float]]:
    """TTFTs of ``samples`` requests one after another, and their engine step times."""
    ttfts: list[float] = []
    steps: list[float] = []
    what = f"interactive TTFT, {label}" + (f" ({warmup} warm-up)" if warmup else "")
    for index in counted(what, warmup + samples).track(range(warmup + samples)):
        time.sleep(next(pauses))
        ttft, result = queued_sample(rig, request_fields(max_tokens))
        if index >= warmup:
            ttfts.append(ttft)
            step = decode_step_ms(result)
            if step is not None:
                steps.append(step)
    return ttfts, steps


def _wait_until_batch_fills(client: Client, batch_slots: int, timeout_s: float = 300.0) -> None:
    """Block until the worker runs as many batch jobs as it may."""
    deadline = time.monotonic() + timeout_s
    while _count(client, Job.status == JobStatus.RUNNING.value) < batch_slots:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker never filled its batch slots")
        time.sleep(0.05)


def _batch_done_since(client: Client, since: datetime) -> int:
    return _count(client, Job.status == JobStatus.DONE.value, Job.finished_at >= since)


def _count(client: Client, *conditions: Any) -> int:
    query = select(func.count()).where(Job.priority == Priority.BATCH.value, *conditions)
    with client.sessions() as session:
        return int(session.scalar(query) or 0)
