"""``llmq bench batching``: does the worker keep the engine's batch as full as direct use?"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.harness import (
    BENCH_PROMPT,
    Rig,
    bench_rig,
    direct_engine,
    direct_options,
    median,
    request_fields,
    rounded,
)
from schemas.queues import Tier
from schemas.settings import Settings


def run_batching(
    settings: Settings, *, tier: Tier, concurrency: int, rounds: int, max_tokens: int
) -> dict[str, Any]:
    """Output tokens/s: direct at 1 and ``concurrency``, queued at ``concurrency``.

    Rounds alternate direct and queued runs; the figures are medians over rounds.
    """
    direct_1: list[float] = []
    direct_n: list[float] = []
    queued_n: list[float] = []
    with bench_rig(settings, tier, concurrency=concurrency) as rig:
        _direct_tok_s(rig, 2, max_tokens, "warm")
        _queued_tok_s(rig, 2, max_tokens)
        for index in range(rounds):
            direct_1.append(_direct_tok_s(rig, 1, max_tokens, f"r{index}-1"))
            direct_n.append(_direct_tok_s(rig, concurrency, max_tokens, f"r{index}-n"))
            queued_n.append(_queued_tok_s(rig, concurrency, max_tokens))
    direct = median(direct_n)
    queued = median(queued_n)
    return {
        "bench": "batching",
        "tier": tier.value,
        "concurrency": concurrency,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "direct_tok_s_1": rounded(median(direct_1)),
        f"direct_tok_s_{concurrency}": rounded(direct),
        f"queued_tok_s_{concurrency}": rounded(queued),
        "queued_over_direct": round(queued / direct, 3),
    }


def _direct_tok_s(rig: Rig, concurrency: int, max_tokens: int, tag: str) -> float:
    engine = direct_engine(rig)
    prompt = engine.render_chat([{"role": "user", "content": BENCH_PROMPT}])
    counts = [0] * concurrency

    def one(slot: int) -> None:
        for delta in engine.stream(prompt, direct_options(max_tokens), f"b-{tag}-{slot}"):
            counts[slot] = delta.completion_tokens

    return _timed(one, concurrency, counts)


def _queued_tok_s(rig: Rig, concurrency: int, max_tokens: int) -> float:
    counts = [0] * concurrency

    def one(slot: int) -> None:
        handle = rig.client.submit(request_fields(max_tokens), tier=rig.tier)
        counts[slot] = handle.result(timeout=600).usage.completion_tokens

    return _timed(one, concurrency, counts)


def _timed(work: Any, concurrency: int, counts: list[int]) -> float:
    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)
