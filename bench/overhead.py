"""``llmq bench overhead``: what the queue path adds to first-token and inter-token time.

The direct side is an engine in this process; the queued side is a worker process,
reached through Redis with the Python client; both run the tier's engine settings and
slots. Only one engine is up at a time (an idle vLLM engine's threads spin and would
slow the other side on a small host), so the sides alternate in blocks (A B, B A...:
``bench.harness.in_block_order``), each starting its engine afresh. This process
runs with the worker's GIL switch interval, so both sides hop threads alike, and keeps
its threads off the engine's compute cores while its engine is up and eases its engine
core's wait, as the worker does (``pin_worker_cpus``, ``engine_core_nice``).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.harness import (
    PAIRED_WARMUP_ROUNDS,
    SETTLE_S,
    StreamTiming,
    bench_rig,
    counted,
    direct_timing,
    engine_only,
    in_block_order,
    queued_timing,
    rounded,
)
from bench.spread import difference_interval, percentile_interval
from schemas.percentiles import median, percentile
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.vllm import VllmEngine
from workers.worker import GIL_SWITCH_INTERVAL_S


def run_overhead(
    settings: Settings, *, tier: Tier, samples: int, max_tokens: int, blocks: int = 2
) -> dict[str, Any]:
    """``samples`` requests per side in ``blocks`` alternating blocks; p50s and the difference.

    Each request runs to its end before the next starts, so both sides see an idle engine.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    per_block = math.ceil(samples / blocks)
    direct: list[StreamTiming] = []
    queued: list[StreamTiming] = []

    def queued_block(block: int) -> None:
        which = f"queued, block {block + 1}/{blocks}"
        with bench_rig(settings, tier, prefill_prompts=False) as rig:
            queued.extend(_block(lambda _i: queued_timing(rig, max_tokens), per_block, label=which))

    def direct_block(block: int) -> None:
        which = f"direct, block {block + 1}/{blocks}"
        with engine_only(settings, tier) as engine:
            direct.extend(_block(_direct_sample(engine, block, max_tokens), per_block, label=which))

    for block in range(blocks):
        # Queued first in the first block: in a quick report the bench before this one
        # left its worker running.
        for run_block in in_block_order([queued_block, direct_block], block):
            run_block(block)
    return _report(direct, queued, tier=tier, max_tokens=max_tokens, blocks=blocks)


def _direct_sample(
    engine: VllmEngine, block: int, max_tokens: int
) -> Callable[[int], StreamTiming]:
    def sample(index: int) -> StreamTiming:
        return direct_timing(engine, f"bench-direct-{block}-{index}", max_tokens)

    return sample


def _block(sample: Callable[[int], StreamTiming], count: int, *, label: str) -> list[StreamTiming]:
    taken = []
    total = PAIRED_WARMUP_ROUNDS + count
    with counted(f"{label} ({PAIRED_WARMUP_ROUNDS} warm-up)", total) as bar:
        for index in range(total):
            time.sleep(SETTLE_S)
            timing = sample(index)
            if index >= PAIRED_WARMUP_ROUNDS:
                taken.append(timing)
            bar.advance()
    return taken


def _report(
    direct: list[StreamTiming],
    queued: list[StreamTiming],
    *,
    tier: Tier,
    max_tokens: int,
    blocks: int,
) -> dict[str, Any]:
    d_ttft, q_ttft = [t.ttft_ms for t in direct], [t.ttft_ms for t in queued]
    d_itl = [t.itl_ms for t in direct if t.itl_ms is not None]
    q_itl = [t.itl_ms for t in queued if t.itl_ms is not None]
    paths = [t.queue_path_ms for t in queued if t.queue_path_ms is not None]
    return {
        "bench": "overhead",
        "tier": tier.value,
        "n": len(direct),
        "blocks": blocks,
        "max_tokens": max_tokens,
        "direct_ttft_ms_p50": rounded(median(d_ttft)),
        "queued_ttft_ms_p50": rounded(median(q_ttft)),
        "added_ms_p50": rounded(median(q_ttft) - median(d_ttft)),
        "added_ms_p50_ci95": difference_interval(d_ttft, q_ttft),
        "direct_ttft_ms_p90": rounded(percentile(d_ttft, 90)),
        "queued_ttft_ms_p90": rounded(percentile(q_ttft, 90)),
        "direct_itl_ms_p50": rounded(median(d_itl)),
        "queued_itl_ms_p50": rounded(median(q_itl)),
        "added_itl_ms_p50": rounded(median(q_itl) - median(d_itl)),
        "added_itl_ms_p50_ci95": difference_interval(d_itl, q_itl),
        # Within each queued request (its reader's first text less the worker's measure
        # of the engine's part): free of the engines' drift between blocks, blind to
        # what the worker's process does to the engine's speed.
        "queue_path_ms_p50": rounded(median(paths)) if paths else None,
        "queue_path_ms_p50_ci95": percentile_interval(paths) if paths else None,
        # Every sample, for the report's distribution plots.
        "direct_ttft_samples_ms": [rounded(x) for x in d_ttft],
        "queued_ttft_samples_ms": [rounded(x) for x in q_ttft],
    }
