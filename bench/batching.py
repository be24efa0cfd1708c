"""``llmq bench batching``: does the worker keep the engine's batch as full as direct use?

Output tokens per second at each concurrency level (1, 2, 4, 8, 16 by default), on the
engine called directly in this process and through the queue to a worker on the same
model. At level ``L`` there are ``L`` requests in flight at all times and each of the
``L`` slots sends ``waves`` requests one after the other, so a level serves ``L x waves``
requests. Only one engine is up at a time (an idle vLLM engine's threads spin and slow
the other on a small host): the direct engine's block first, then the worker's; each
block sweeps the levels ``rounds`` times and the figures are medians over rounds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bench.harness import (
    BENCH_PROMPT,
    Rig,
    bench_rig,
    counted,
    direct_options,
    engine_only,
    request_fields,
    rounded,
)
from schemas.errors import ConfigError
from schemas.percentiles import median
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.base import EngineRequest
from workers.engine.vllm import VllmEngine

LEVELS = (1, 2, 4, 8, 16)


def parse_levels(text: str) -> tuple[int, ...]:
    """``"1,2,4,8,16"`` -> ``(1, 2, 4, 8, 16)``; raises ``ConfigError`` for anything else."""
    try:
        levels = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError as exc:
        raise ConfigError(
            f"--levels needs whole numbers separated by commas, not {text!r}"
        ) from exc
    if not levels or levels[0] < 1:
        raise ConfigError(f"--levels needs one or more levels of at least 1, not {text!r}")
    return levels


def run_batching(
    settings: Settings,
    *,
    tier: Tier,
    concurrency: int,
    rounds: int,
    max_tokens: int,
    levels: str = ",".join(map(str, LEVELS)),
    waves: int = 2,
) -> dict[str, Any]:
    """Output tokens/s, direct and queued, at every level of ``levels`` and at ``concurrency``.

    The headline figures (``direct_tok_s_1``, ``direct_tok_s_N``, ``queued_tok_s_N``,
    ``queued_over_direct``) are at 1 and ``concurrency``; the sweep is in
    ``levels``/``direct_tok_s_by_level``/``queued_tok_s_by_level``. Raises
    ``ConfigError`` for malformed levels.
    """
    if waves < 1:
        raise ConfigError("--waves needs at least 1")
    swept = tuple(sorted({*parse_levels(levels), 1, concurrency}))
    direct: dict[int, list[float]] = {level: [] for level in swept}
    queued: dict[int, list[float]] = {level: [] for level in swept}
    # Both engines run a batch as large as the highest level.
    slots = max(swept)
    with engine_only(settings, tier, concurrency=slots) as engine:
        _direct_tok_s(engine, 2, 1, max_tokens, "warm")
        for index in range(rounds):
            for level in _sweep(f"direct engine, round {index + 1}/{rounds}", swept):
                tag = f"r{index}-{level}"
                direct[level].append(_direct_tok_s(engine, level, waves, max_tokens, tag))
    with bench_rig(settings, tier, concurrency=slots, prefill_prompts=False) as rig:
        _queued_tok_s(rig, 2, 1, max_tokens)
        for index in range(rounds):
            for level in _sweep(f"through the queue, round {index + 1}/{rounds}", swept):
                queued[level].append(_queued_tok_s(rig, level, waves, max_tokens))
    return sweep_figures(
        tier=tier,
        concurrency=concurrency,
        rounds=rounds,
        max_tokens=max_tokens,
        waves=waves,
        direct=direct,
        queued=queued,
    )


def sweep_figures(
    *,
    tier: Tier,
    concurrency: int,
    rounds: int,
    max_tokens: int,
    waves: int,
    direct: dict[int, list[float]],
    queued: dict[int, list[float]],
) -> dict[str, Any]:
    """The bench's JSON from each level's per-round tokens/s (medians over rounds)."""
    levels = sorted(direct)
    d = {level: median(direct[level]) for level in levels}
    q = {level: median(queued[level]) for level in levels}
    return {
        "bench": "batching",
        "tier": tier.value,
        "concurrency": concurrency,
        "rounds": rounds,
        "max_tokens": max_tokens,
        "direct_tok_s_1": rounded(d[1]),
        f"direct_tok_s_{concurrency}": rounded(d[concurrency]),
        f"queued_tok_s_{concurrency}": rounded(q[concurrency]),
        "queued_over_direct": round(q[concurrency] / d[concurrency], 3),
        # The sweep, for the report's throughput-vs-concurrency plot.
        "levels": levels,
        "waves": waves,
        "requests_per_level": [level * waves for level in levels],
        "direct_tok_s_by_level": [rounded(d[level]) for level in levels],
        "queued_tok_s_by_level": [rounded(q[level]) for level in levels],
    }


def _sweep(label: str, levels: Sequence[int]) -> Iterator[int]:
    """``levels`` with a bar over them on stderr, naming the level running."""
    with counted(label, len(levels), unit="levels") as bar:
        for level in levels:
            bar.phase(f"running {level} at once")
            yield level
            bar.advance(note=f"{level} at once done")


def _direct_tok_s(
    engine: VllmEngine, concurrency: int, waves: int, max_tokens: int, tag: str
) -> float:
    prompt = engine.render_chat([{"role": "user", "content": BENCH_PROMPT}])
    counts = [0] * concurrency

    def one(slot: int) -> None:
        for wave in range(waves):
            request_id = f"b-{tag}-{slot}-{wave}"
            tokens = 0
            request = EngineRequest(prompt, direct_options(max_tokens), request_id)
            for delta in engine.stream(request):
                tokens = delta.completion_tokens
            counts[slot] += tokens

    return _timed(one, concurrency, counts)


def _queued_tok_s(rig: Rig, concurrency: int, waves: int, max_tokens: int) -> float:
    counts = [0] * concurrency

    def one(slot: int) -> None:
        for _wave in range(waves):
            handle = rig.client.submit(request_fields(max_tokens), tier=rig.tier)
            counts[slot] += handle.result(timeout=600).usage.completion_tokens

    return _timed(one, concurrency, counts)


def _timed(work: Callable[[int], None], concurrency: int, counts: Sequence[int]) -> float:
    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)
