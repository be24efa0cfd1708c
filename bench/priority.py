"""``llmq bench priority``: interactive TTFT on an idle worker vs one flooded with batch."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from bench.goodput import Slo, wilson_interval
from bench.harness import (
    PAIRED_WARMUP_ROUNDS,
    SETTLE_S,
    Rig,
    bench_rig,
    counted,
    queued_sample,
    request_fields,
    rounded,
    step,
)
from bench.spread import ratio_interval
from producer.client import Client
from producer.enqueue import withdraw_jobs
from producer.status import live_workers
from schemas.broker import redis_client
from schemas.jobs import JobResult, JobStatus
from schemas.percentiles import median, percentile
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from schemas.tables import Job, utcnow
from workers.scheduler.slots import slot_shares

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
    blocks: int = 2,
    seed: int = 7,
    arrival_jitter_s: float = ARRIVAL_JITTER_S,
) -> dict[str, Any]:
    """Interactive TTFT, ``samples`` times on an idle worker and ``samples`` times with
    ``batch_jobs`` batch jobs queued and the worker busy with them; one worker, one run.

    The two sides alternate (``phases``): a host whose speed drifts for tens of seconds
    at a time would otherwise bill its slow spell to whichever side ran then. Each
    loaded phase starts from a fresh flood and ends with it cancelled and withdrawn.
    Also counts the batch jobs that finished while the loaded samples ran: batch work
    must progress even while interactive work comes first. A p99 needs 100 samples or
    more: fewer are refused. Requests are sent at random moments (``seed``), not in
    step with the engine (``ARRIVAL_JITTER_S``; 0: a fixed pause, in step).
    """
    if samples < MIN_P99_SAMPLES:
        raise ValueError(f"a p99 needs at least {MIN_P99_SAMPLES} samples, not {samples}")
    shares = slot_shares(settings.tier(tier), concurrency)
    config = settings.tier(tier)
    slo = Slo(ttft_ms=config.interactive_ttft_slo_ms, tpot_ms=config.interactive_itl_slo_ms)
    pauses = arrival_pauses(random.Random(seed), arrival_jitter_s)
    idle, loaded, flood = SideSamples(), SideSamples(), FloodCounts()
    with bench_rig(settings, tier, concurrency=concurrency, prefill_prompts=False) as rig:
        _interactive_samples(
            rig,
            PAIRED_WARMUP_ROUNDS,
            max_tokens,
            pauses,
            SideSamples(),
            label="warm-up",
            slo=slo,
        )
        worker = _worker_fields(rig)
        for number, (is_loaded, size) in enumerate(phases(samples, blocks), start=1):
            if not is_loaded:
                label = f"idle worker (phase {number})"
                _interactive_samples(rig, size, max_tokens, pauses, idle, label=label, slo=slo)
                continue
            with flooded(rig, shares.batch_max, batch_jobs, batch_max_tokens, flood):
                label = f"worker busy (phase {number})"
                _interactive_samples(rig, size, max_tokens, pauses, loaded, label=label, slo=slo)
    idle_p99, loaded_p99 = percentile(idle.ttfts, 99), percentile(loaded.ttfts, 99)
    step_ms = median(idle.steps) if idle.steps else None
    return {
        "bench": "priority",
        "tier": tier.value,
        "n": samples,
        "blocks": blocks,
        "slots": shares.slots,
        "batch_max_slots": shares.batch_max,
        "batch_jobs": batch_jobs,
        **worker,
        "arrival_jitter_s": arrival_jitter_s,
        "idle_ttft_p50_ms": rounded(median(idle.ttfts)),
        "loaded_ttft_p50_ms": rounded(median(loaded.ttfts)),
        "idle_ttft_p95_ms": rounded(percentile(idle.ttfts, 95)),
        "loaded_ttft_p95_ms": rounded(percentile(loaded.ttfts, 95)),
        "idle_ttft_p99_ms": rounded(idle_p99),
        "loaded_ttft_p99_ms": rounded(loaded_p99),
        "ratio": rounded(loaded_p99 / idle_p99),
        # A p99 of 100 samples is the second-slowest: resampled, it moves a lot.
        "ratio_ci95": ratio_interval(idle.ttfts, loaded.ttfts, 99),
        "idle_step_ms_p50": None if step_ms is None else rounded(step_ms),
        # The interactive request's own decode steps, batch sequences beside it.
        "loaded_step_ms_p50": rounded(median(loaded.steps)) if loaded.steps else None,
        "one_step_wait_ratio_model": (
            None if step_ms is None else rounded(one_step_wait_ratio(idle.ttfts, step_ms))
        ),
        "idle_plus_step_wait_ratio_model": (
            None if step_ms is None else rounded(idle_plus_step_wait_ratio(idle.ttfts, step_ms))
        ),
        **_queue_path_fields("idle", idle),
        **_queue_path_fields("loaded", loaded),
        # The goal: people inside their SLO while batch takes what the SLO leaves.
        "slo_ttft_ms": slo.ttft_ms,
        "slo_tpot_ms": slo.tpot_ms,
        "idle_slo_attainment": idle.attainment(),
        "loaded_slo_attainment": loaded.attainment(),
        "loaded_slo_attainment_ci95": wilson_interval(sum(loaded.met), len(loaded.met)),
        "loaded_batch_tok_s": flood.tokens_per_s(),
        "batch_tokens_during": flood.tokens_during,
        "batch_completed_during": flood.completed_during,
        "batch_still_queued_after": flood.still_queued_after,
        "batch_messages_withdrawn": flood.withdrawn,
        "idle_ttft_samples_ms": [rounded(ms) for ms in idle.ttfts],
        "loaded_ttft_samples_ms": [rounded(ms) for ms in loaded.ttfts],
    }


def phases(samples: int, blocks: int) -> list[tuple[bool, int]]:
    """The run's phases in order, as (loaded, samples): ``blocks`` loaded phases, and
    the idle samples around and between them, in ABBA order (idle, loaded, loaded,
    idle, idle, loaded, ...; adjacent halves of one side merge). A drift that runs
    one way through the run then weighs on both sides alike."""
    if blocks < 1 or samples < 2 * blocks:
        raise ValueError(f"{samples} samples cannot make {blocks} blocks of each side")
    halves = [_split(samples, 2 * blocks), _split(samples, 2 * blocks)]
    merged: list[tuple[bool, int]] = []
    for is_loaded in [False, True, True, False] * blocks:
        size = halves[is_loaded].pop(0)
        if merged and merged[-1][0] == is_loaded:
            merged[-1] = (is_loaded, merged[-1][1] + size)
        else:
            merged.append((is_loaded, size))
    return merged


def _split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` near-equal whole parts, the larger ones first."""
    size, extra = divmod(total, parts)
    return [size + (index < extra) for index in range(parts)]


@dataclass
class FloodCounts:
    """What the loaded phases' floods did, summed over the phases."""

    completed_during: int = 0
    still_queued_after: int = 0
    withdrawn: int = 0
    tokens_during: int = 0
    """Completion tokens of the batch jobs that finished during the loaded phases."""
    seconds: float = 0.0
    """How long the loaded phases' samples ran, summed."""

    def tokens_per_s(self) -> float | None:
        return rounded(self.tokens_during / self.seconds) if self.seconds > 0 else None


@contextlib.contextmanager
def flooded(
    rig: Rig, batch_slots: int, batch_jobs: int, batch_max_tokens: int, counts: FloodCounts
) -> Iterator[None]:
    """The worker busy with a fresh flood of ``batch_jobs`` batch jobs for the block;
    on leaving, what is left of it is cancelled and withdrawn, and the worker idle."""
    client = rig.client
    backlog = [
        client.submit(_batch_request(i, batch_max_tokens), tier=rig.tier, priority="batch")
        for i in counted("queueing the batch flood", batch_jobs, unit="jobs").track(
            range(batch_jobs)
        )
    ]
    try:
        with step(f"waiting for the worker to fill its {batch_slots} batch slots"):
            _wait_until_batch_runs(client, lambda running: running >= batch_slots)
        started, began = utcnow(), time.monotonic()
        yield
        counts.seconds += time.monotonic() - began
        done, tokens = _batch_done_since(client, started)
        counts.completed_during += done
        counts.tokens_during += tokens
        counts.still_queued_after += _count(
            client,
            Job.status == JobStatus.QUEUED.value,
            Job.id.in_([h.job_id for h in backlog]),
        )
    finally:
        with step("cancelling and withdrawing the rest of the flood"):
            counts.withdrawn += _clear(client, rig.tier, [h.job_id for h in backlog])


def _clear(client: Client, tier: Tier, job_ids: list[str]) -> int:
    """Cancel the jobs, then take their messages off the queue; return how many messages
    were taken. Left there, they would be popped (and skipped) by a later worker on the
    same broker, their rows gone with this bench's database. Cancelled first: a queued
    row without a message is one the reaper sends again. Taken again once nothing runs:
    a job that gave way to interactive work went back to the queue meanwhile."""
    queue = queue_name(tier, Priority.BATCH)
    for job_id in job_ids:
        client.cancel(job_id)
    withdrawn = withdraw_jobs(client.redis, queue, job_ids)
    _wait_until_batch_runs(client, lambda running: running == 0)
    return withdrawn + withdraw_jobs(client.redis, queue, job_ids)


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


def idle_plus_step_wait_ratio(idle_ttft_ms: list[float], step_ms: float) -> float:
    """A model, not a measurement, as ``one_step_wait_ratio`` but with the idle side's
    own spread kept: each idle first token plus a wait drawn evenly from nothing to one
    step, the p99 of that mix over the idle p99. On a host whose idle first tokens have
    a tail (slow spells), the tail and the wait add up, which the median cannot show.
    """
    if step_ms <= 0:
        return 1.0

    def share_by(t: float) -> float:  # the mix's distribution function at t
        return sum(min(max((t - idle) / step_ms, 0.0), 1.0) for idle in idle_ttft_ms) / len(
            idle_ttft_ms
        )

    low, high = min(idle_ttft_ms), max(idle_ttft_ms) + step_ms
    for _ in range(60):  # bisection, to far below a microsecond
        middle = (low + high) / 2
        low, high = (middle, high) if share_by(middle) < 0.99 else (low, middle)
    return high / percentile(idle_ttft_ms, 99)


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


@dataclass
class SideSamples:
    """One side's interactive samples, in milliseconds."""

    ttfts: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    """The engine's decode step, per sample that has one (``decode_step_ms``)."""
    queue_paths: list[float] = field(default_factory=list)
    """Each first token less the engine's part as the worker timed it (``queue_path_ms``)."""
    met: list[bool] = field(default_factory=list)
    """Per sample: first token and decode step (where it has one) inside the tier's SLOs."""

    def attainment(self) -> float | None:
        """The share of samples inside the SLOs (None without samples)."""
        return round(sum(self.met) / len(self.met), 4) if self.met else None


def queue_path_ms(ttft_ms: float, result: JobResult) -> float | None:
    """The part of a first token that was not the engine's: submit, queue, claim,
    publish and delivery (``Timings.engine_ttft_ms``); None where the worker gave none."""
    engine_ms = result.timings.engine_ttft_ms
    return None if engine_ms is None else ttft_ms - engine_ms


def _queue_path_fields(side: str, samples: SideSamples) -> dict[str, float | None]:
    """Whether a side's slow first tokens were slow in the engine or around it."""
    paths = samples.queue_paths
    return {
        f"{side}_queue_path_ms_p50": rounded(median(paths)) if paths else None,
        f"{side}_queue_path_ms_p99": rounded(percentile(paths, 99)) if paths else None,
    }


def _worker_fields(rig: Rig) -> dict[str, Any]:
    """What the worker measured of its engine, and the batch share it chose from that
    (``workers.scheduler.slots``): 0 batch slots while people wait means batch pauses."""
    client = redis_client(rig.settings.broker_url)
    try:
        workers = [w for w in live_workers(client) if w.tier == rig.tier]
    finally:
        client.close()
    if not workers:
        return {}
    worker = workers[0]
    return {
        "worker_engine_first_token_ms": worker.engine_first_token_ms,
        "worker_engine_step_ms": worker.engine_step_ms,
        "batch_slots_under_interactive": worker.batch_under_interactive,
    }


def _interactive_samples(
    rig: Rig,
    samples: int,
    max_tokens: int,
    pauses: Iterator[float],
    into: SideSamples,
    *,
    label: str,
    slo: Slo,
) -> None:
    """``samples`` requests one after another, their figures added to ``into``."""
    for _ in counted(f"interactive TTFT, {label}", samples).track(range(samples)):
        time.sleep(next(pauses))
        ttft, result = queued_sample(rig, request_fields(max_tokens))
        into.ttfts.append(ttft)
        step = decode_step_ms(result)
        if step is not None:
            into.steps.append(step)
        into.met.append(ttft <= slo.ttft_ms and (step is None or step <= slo.tpot_ms))
        path = queue_path_ms(ttft, result)
        if path is not None:
            into.queue_paths.append(path)


def _wait_until_batch_runs(
    client: Client, enough: Callable[[int], bool], timeout_s: float = 300.0
) -> None:
    """Block until the number of running batch jobs is ``enough``."""
    deadline = time.monotonic() + timeout_s
    while not enough(_count(client, Job.status == JobStatus.RUNNING.value)):
        if time.monotonic() > deadline:
            raise RuntimeError("the worker's batch jobs never reached the count waited for")
        time.sleep(0.05)


def _batch_done_since(client: Client, since: datetime) -> tuple[int, int]:
    """Batch jobs done since ``since``, and their completion tokens."""
    query = select(func.count(), func.coalesce(func.sum(Job.completion_tokens), 0)).where(
        Job.priority == Priority.BATCH.value,
        Job.status == JobStatus.DONE.value,
        Job.finished_at >= since,
    )
    with client.sessions() as session:
        row = session.execute(query).one()
    return int(row[0] or 0), int(row[1] or 0)


def _count(client: Client, *conditions: Any) -> int:
    query = select(func.count()).where(Job.priority == Priority.BATCH.value, *conditions)
    with client.sessions() as session:
        return int(session.scalar(query) or 0)
