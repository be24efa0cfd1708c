"""The mixed bench's arithmetic: goodput in the manner of DistServe, per side.

A side's outcomes become its figures here: interactive SLO attainment (the share of the
trace's interactive requests answered within both the first-token and the inter-token
SLO; a failed or unfinished request is a miss), batch goodput (tokens/s of batch
requests completed inside the trace), per-request percentiles with their sample size,
CPU-seconds per completed token, and intervals on the headline ratios.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.harness import rounded
from schemas.percentiles import percentile, percentile_or_none

BOOTSTRAP_ROUNDS = 2000
WINDOW_S = 10.0
"""Batch goodput's bootstrap resamples the flood in windows of this length."""


@dataclass
class Outcome:
    """What one request of the trace got, in seconds from the replay's start."""

    index: int
    kind: str
    sent: float
    finished: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    tokens: int = 0
    text: str = ""
    ok: bool = False
    cut: bool = False
    error: str | None = None

    def tpot_ms(self) -> float | None:
        """Mean time between this request's tokens after the first (None without two)."""
        if self.ttft_ms is None or self.e2e_ms is None or self.tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.tokens - 1)


@dataclass(frozen=True)
class Slo:
    """The interactive SLOs a side is judged by (the served tier's settings)."""

    ttft_ms: float
    tpot_ms: float

    def met(self, outcome: Outcome) -> bool:
        if not outcome.ok or outcome.ttft_ms is None or outcome.ttft_ms > self.ttft_ms:
            return False
        tpot = outcome.tpot_ms()
        return tpot is None or tpot <= self.tpot_ms


@dataclass(frozen=True)
class SideFigures:
    """One side's figures, before they get the side's prefix."""

    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    interactive_n: int
    interactive_ok: int
    slo_met: int
    batch_completed: int
    batch_cut: int
    batch_tok_s: float
    failed: int
    cost: float

    @property
    def slo_attainment(self) -> float | None:
        return self.slo_met / self.interactive_n if self.interactive_n else None


def busy_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end]`` intervals."""
    total = 0.0
    current_start: float | None = None
    current_end = 0.0
    for start, end in sorted(intervals):
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_start is not None:
        total += current_end - current_start
    return total


def side_figures(
    outcomes: Sequence[Outcome],
    *,
    flood_s: float,
    cost_weight: float,
    slo: Slo | None = None,
) -> SideFigures:
    """Percentiles, SLO attainment, batch goodput and cost of one side's outcomes.

    ``batch_tok_s``: completion tokens of batch requests that finished inside the
    trace, over the flood's length. A cut batch request (still running when the trace
    ended) is neither completed nor failed. Every other request that did not end with
    text is failed. Without ``slo`` no request meets it.
    """
    asked = [o for o in outcomes if o.kind == "interactive"]
    interactive = [o for o in asked if o.ok]
    batch_done = [o for o in outcomes if o.kind == "batch" and o.ok]
    ttft = [o.ttft_ms for o in interactive if o.ttft_ms is not None]
    tpot = [t for t in (o.tpot_ms() for o in interactive) if t is not None]
    e2e = [o.e2e_ms for o in interactive if o.e2e_ms is not None]
    intervals = [(o.sent, o.finished) for o in outcomes if o.finished is not None]
    return SideFigures(
        ttft_p50_ms=percentile_or_none(ttft, 50, ndigits=2),
        ttft_p95_ms=percentile_or_none(ttft, 95, ndigits=2),
        ttft_p99_ms=percentile_or_none(ttft, 99, ndigits=2),
        tpot_p50_ms=percentile_or_none(tpot, 50, ndigits=2),
        tpot_p95_ms=percentile_or_none(tpot, 95, ndigits=2),
        e2e_p50_ms=percentile_or_none(e2e, 50, ndigits=2),
        e2e_p95_ms=percentile_or_none(e2e, 95, ndigits=2),
        interactive_n=len(asked),
        interactive_ok=len(interactive),
        slo_met=sum(slo.met(o) for o in asked) if slo is not None else 0,
        batch_completed=len(batch_done),
        batch_cut=sum(o.cut for o in outcomes),
        batch_tok_s=rounded(sum(o.tokens for o in batch_done) / flood_s) if flood_s > 0 else 0.0,
        failed=sum(not o.ok and not o.cut for o in outcomes),
        cost=rounded(busy_seconds(intervals) * cost_weight),
    )


def quality_percent(scores: Sequence[bool | float]) -> float | None:
    """Mean score in percent points (a failed request scores 0); None without cases."""
    if not scores:
        return None
    return rounded(100.0 * sum(float(s) for s in scores) / len(scores))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The 95% Wilson score interval of a proportion (None for no trials)."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def window_tokens(
    outcomes: Sequence[Outcome], *, flood_start: float, flood_s: float, window_s: float = WINDOW_S
) -> list[float]:
    """Completed batch tokens in each ``window_s`` window of the flood (by finish time)."""
    count = max(1, int(flood_s // window_s))
    windows = [0.0] * count
    for o in outcomes:
        if o.kind != "batch" or not o.ok or o.finished is None:
            continue
        slot = int((o.finished - flood_start) // window_s)
        windows[min(max(slot, 0), count - 1)] += o.tokens
    return windows


def ratio_interval(
    ours: Sequence[float], theirs: Sequence[float], *, seed: int = 0
) -> tuple[float, float] | None:
    """95% bootstrap interval of ``sum(ours) / sum(theirs)``, each side's windows
    resampled on its own; None where ``theirs`` has nothing."""
    if not ours or not theirs or sum(theirs) == 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(BOOTSTRAP_ROUNDS):
        a = sum(rng.choice(ours) for _ in ours)
        b = sum(rng.choice(theirs) for _ in theirs)
        if b > 0:
            ratios.append(a / b)
    if not ratios:
        return None
    return (round(percentile(ratios, 2.5), 3), round(percentile(ratios, 97.5), 3))


def side_keys(name: str, side: SideFigures) -> dict[str, Any]:
    """One side's figures under its prefix."""
    attainment = side.slo_attainment
    interval = wilson_interval(side.slo_met, side.interactive_n)
    return {
        f"{name}_slo_attainment": None if attainment is None else round(attainment, 4),
        f"{name}_slo_attainment_ci95": interval,
        f"{name}_batch_goodput_tok_s": side.batch_tok_s,
        f"{name}_interactive_n": side.interactive_n,
        f"{name}_failed": side.failed,
        f"{name}_interactive_ttft_p50_ms": side.ttft_p50_ms,
        f"{name}_interactive_ttft_p95_ms": side.ttft_p95_ms,
        f"{name}_interactive_ttft_p99_ms": side.ttft_p99_ms,
        f"{name}_interactive_tpot_p50_ms": side.tpot_p50_ms,
        f"{name}_interactive_tpot_p95_ms": side.tpot_p95_ms,
        f"{name}_interactive_e2e_p50_ms": side.e2e_p50_ms,
        f"{name}_interactive_e2e_p95_ms": side.e2e_p95_ms,
        f"{name}_interactive_ok": side.interactive_ok,
        f"{name}_batch_completed": side.batch_completed,
        f"{name}_batch_cut_at_end": side.batch_cut,
        f"{name}_cost": side.cost,
    }
