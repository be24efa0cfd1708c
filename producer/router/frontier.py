"""The cost-quality frontier of routing, computed offline from one pass per tier.

Every case is answered once on ``small`` and once on ``large`` (greedy, so an answer
does not depend on which router would have sent it there) and each answer is stored
with its score, latency and the tier's engine time. Any routing policy that is a
threshold on a decision score can then be evaluated without another engine run: a
case goes large when its score is at or above the threshold, and takes that tier's
stored answer. Sweeping the threshold from "every case small" to "every case large"
gives the frontier (RouteLLM, arXiv 2406.18665): the share of large calls against the
quality recovered, summarised as APGR (the area under the recovered-gap curve) and as
the share of large calls needed to recover 80% and 95% of the gap between the tiers.

Quality is the A/B gate's: the case's rule scores each answer, and each point's
quality and its paired difference to all-large come with 95% intervals from
:func:`producer.quality.stats.paired_gate` (Wilson and Tango for right/wrong scores, a
paired bootstrap for graded ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from producer.quality.stats import DEFAULT_CONFIDENCE, Interval, paired_gate
from schemas.errors import ConfigError
from schemas.percentiles import percentile

RECOVERY_TARGETS = (0.8, 0.95)
MIN_FRONTIER_CASES = 10


@dataclass(frozen=True)
class StoredAnswer:
    """One case answered on one tier: its score and what it cost."""

    case_id: str
    score: float
    """The case rule's score in [0, 1] (right is 1, wrong or failed is 0)."""
    total_ms: float | None
    """Submit to last token; None when the job failed."""
    engine_s: float
    """The case's share of the tier's engine time (see :func:`engine_shares`)."""


@dataclass(frozen=True)
class TierPass:
    """Every case answered on one tier, in one block with only that tier's engine up."""

    tier: str
    answers: Mapping[str, StoredAnswer]


class FrontierPoint(BaseModel):
    """One threshold: cases whose score is at or above it go large."""

    model_config = ConfigDict(frozen=True)

    threshold: float
    large_share: float
    large_calls: int
    quality: Interval
    delta_vs_all_large: Interval
    """Quality here minus quality of all-large, as a fraction, paired over the cases."""
    mean_ms: float
    p95_ms: float
    engine_s: float
    recovered: float | None
    """Share of the quality gap between all-small and all-large recovered here (PGR)."""


class RandomBaseline(BaseModel):
    """A router that sends each case large with probability ``large_share``, in
    expectation: its quality is the straight line between all-small and all-large."""

    model_config = ConfigDict(frozen=True)

    apgr: float | None
    large_share_for_80pct: float | None
    large_share_for_95pct: float | None
    quality: list[tuple[float, float]]
    """``(large_share, expected quality)`` at the frontier's shares."""


class Frontier(BaseModel):
    """The sweep, its summary figures and the random baseline."""

    model_config = ConfigDict(frozen=True)

    cases: int
    confidence: float
    router: str | None = None
    """The model hash of the router whose scores were swept (``RouterArtifact.model_hash``)."""
    quality_small: float
    quality_large: float
    apgr: float | None
    """Area under recovered-gap vs large share; None when large is not better than small."""
    large_share_for_80pct: float | None
    large_share_for_95pct: float | None
    points: list[FrontierPoint]
    """From all-small (share 0) to all-large (share 1), share ascending."""
    random: RandomBaseline


class OperatingPoint(BaseModel):
    """The point :func:`pick_operating_point` chose, with its figures against all-large."""

    model_config = ConfigDict(frozen=True)

    threshold: float
    max_quality_drop_points: float
    large_share: float
    quality: float
    quality_drop_points: float
    """All-large quality minus the point's, in points (negative: the point is better)."""
    quality_drop_upper_points: float
    """The drop's upper 95% bound, in points (the point's difference's lower bound)."""
    latency_ratio_vs_all_large: float | None
    p95_latency_ratio_vs_all_large: float | None
    engine_s_ratio_vs_all_large: float | None


def engine_shares(wall_s: float, total_ms: Sequence[float | None]) -> list[float]:
    """Split a tier block's wall time over its cases in proportion to their job times.

    The engine served several cases at once, so a case's own latency overstates what it
    cost; its share of the block's wall time does not, and the shares add up to the
    block. A failed case (no time) is charged the mean of the others.
    """
    known = [t for t in total_ms if t is not None]
    if not total_ms:
        return []
    fill = sum(known) / len(known) if known else 1.0
    times = [fill if t is None else t for t in total_ms]
    total = sum(times)
    if total <= 0:
        return [wall_s / len(times)] * len(times)
    return [wall_s * t / total for t in times]


def thresholds(scores: Sequence[float]) -> list[float]:
    """One threshold per distinct split of ``scores``, from all-small to all-large.

    Each lies midway between two neighbouring distinct scores, so a new request scoring
    near a case's score is treated like that case; the first is above every score (and
    above 1 when a score is 1), the last below every score (0 when a score is 0).
    """
    distinct = sorted(set(scores), reverse=True)
    if not distinct:
        return [0.0]
    top = distinct[0]
    result = [(top + 1.0) / 2 if top < 1.0 else top + 1e-3]
    for higher, lower in zip(distinct, [*distinct[1:], None], strict=True):
        result.append((higher + lower) / 2 if lower is not None else higher / 2)
    return result


def recovered(quality: float, small: float, large: float) -> float | None:
    """Performance gap recovered: 0 at all-small's quality, 1 at all-large's."""
    gap = large - small
    return (quality - small) / gap if gap > 0 else None


def area_under(shares: Sequence[float], values: Sequence[float | None]) -> float | None:
    """Trapezoid area of ``values`` over ``shares`` (which run from 0 to 1)."""
    if any(v is None for v in values) or len(shares) < 2:
        return None
    area = 0.0
    for i in range(1, len(shares)):
        left, right = values[i - 1], values[i]
        assert left is not None and right is not None
        area += (shares[i] - shares[i - 1]) * (left + right) / 2
    return area


def share_to_recover(
    shares: Sequence[float], values: Sequence[float | None], target: float
) -> float | None:
    """The smallest large share whose recovered gap reaches ``target``."""
    for share, value in zip(shares, values, strict=True):
        if value is not None and value >= target - 1e-12:
            return share
    return None


def compute_frontier(
    small: TierPass,
    large: TierPass,
    scores: Mapping[str, float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    router: str | None = None,
) -> Frontier:
    """Sweep a threshold over ``scores`` (higher: more likely to need large).

    Uses the cases present in both passes and in ``scores``. Raises ``ConfigError`` with
    fewer than ``MIN_FRONTIER_CASES`` such cases.
    """
    ids = sorted(set(small.answers) & set(large.answers) & set(scores))
    if len(ids) < MIN_FRONTIER_CASES:
        raise ConfigError(
            f"the frontier needs at least {MIN_FRONTIER_CASES} cases answered on both "
            f"tiers and scored by the router; found {len(ids)}"
        )
    on_large = [large.answers[i] for i in ids]
    on_small = [small.answers[i] for i in ids]
    case_scores = [float(scores[i]) for i in ids]
    all_large = [a.score for a in on_large]
    quality_small = sum(a.score for a in on_small) / len(ids)
    quality_large = sum(all_large) / len(ids)
    all_large_ms = [a.total_ms for a in on_large if a.total_ms is not None]
    points = []
    for threshold in thresholds(case_scores):
        chosen = [
            big if s >= threshold else little
            for s, big, little in zip(case_scores, on_large, on_small, strict=True)
        ]
        calls = sum(s >= threshold for s in case_scores)
        gate = paired_gate(
            list(zip(all_large, [a.score for a in chosen], strict=True)),
            confidence=confidence,
            seed=seed,
        )
        latencies = [a.total_ms for a in chosen if a.total_ms is not None] or all_large_ms
        points.append(
            FrontierPoint(
                threshold=round(threshold, 6),
                large_share=calls / len(ids),
                large_calls=calls,
                quality=gate.b,
                delta_vs_all_large=gate.delta,
                mean_ms=round(sum(latencies) / len(latencies), 1) if latencies else math.nan,
                p95_ms=round(percentile(latencies, 95), 1) if latencies else math.nan,
                engine_s=round(sum(a.engine_s for a in chosen), 3),
                recovered=recovered(gate.b.value, quality_small, quality_large),
            )
        )
    shares = [p.large_share for p in points]
    gained = [p.recovered for p in points]
    # A random router's expected quality is the straight line between the two tiers.
    expected = [quality_small + s * (quality_large - quality_small) for s in shares]
    line = [recovered(q, quality_small, quality_large) for q in expected]
    baseline = RandomBaseline(
        apgr=area_under(shares, line),
        large_share_for_80pct=share_to_recover(shares, line, RECOVERY_TARGETS[0]),
        large_share_for_95pct=share_to_recover(shares, line, RECOVERY_TARGETS[1]),
        quality=list(zip(shares, expected, strict=True)),
    )
    return Frontier(
        cases=len(ids),
        confidence=confidence,
        router=router,
        quality_small=quality_small,
        quality_large=quality_large,
        apgr=area_under(shares, gained),
        large_share_for_80pct=share_to_recover(shares, gained, RECOVERY_TARGETS[0]),
        large_share_for_95pct=share_to_recover(shares, gained, RECOVERY_TARGETS[1]),
        points=points,
        random=baseline,
    )


def pick_operating_point(frontier: Frontier, *, max_quality_drop_points: float) -> OperatingPoint:
    """The cheapest point (fewest large calls) whose quality is within
    ``max_quality_drop_points`` of all-large by its interval's lower bound: the paired
    difference to all-large must have its lower bound at or above ``-max/100``.

    Raises ``ConfigError`` when no point qualifies (too few cases to bound even
    all-large's own interval that tightly) or the frontier has no all-large point.
    """
    if max_quality_drop_points < 0:
        raise ConfigError("--max-quality-drop is a number of points, zero or more")
    if not frontier.points or frontier.points[-1].large_share != 1.0:
        raise ConfigError("the frontier has no all-large point to compare with")
    everything = frontier.points[-1]
    limit = -max_quality_drop_points / 100
    for point in frontier.points:  # share ascending: the first that qualifies is cheapest
        if point.delta_vs_all_large.low >= limit - 1e-12:
            return _operating_point(point, everything, max_quality_drop_points)
    raise ConfigError(
        f"no point of the frontier is within {max_quality_drop_points:g} points of all-large "
        f"by its lower bound, all-large itself included: {frontier.cases} cases are too few "
        "for that bound; measure more cases or allow a larger drop"
    )


def _ratio(value: float, base: float) -> float | None:
    return round(value / base, 4) if base > 0 and not math.isnan(value) else None


def _operating_point(
    point: FrontierPoint, everything: FrontierPoint, max_drop: float
) -> OperatingPoint:
    return OperatingPoint(
        threshold=point.threshold,
        max_quality_drop_points=max_drop,
        large_share=point.large_share,
        quality=point.quality.value,
        quality_drop_points=round(-100 * point.delta_vs_all_large.value, 3),
        quality_drop_upper_points=round(-100 * point.delta_vs_all_large.low, 3),
        latency_ratio_vs_all_large=_ratio(point.mean_ms, everything.mean_ms),
        p95_latency_ratio_vs_all_large=_ratio(point.p95_ms, everything.p95_ms),
        engine_s_ratio_vs_all_large=_ratio(point.engine_s, everything.engine_s),
    )


def frontier_from_json(data: Mapping[str, Any]) -> Frontier:
    """The frontier in a JSON object: ``llmq bench routing --json``'s whole output (its
    ``frontier`` key) or the frontier itself. Raises ``ConfigError`` if there is none."""
    found = data.get("frontier", data)
    try:
        return Frontier.model_validate(found)
    except ValueError as exc:
        raise ConfigError(f"no routing frontier in that JSON: {exc}") from exc


def tier_pass_from_json(data: Mapping[str, Any]) -> TierPass:
    """A stored pass: ``{"tier": ..., "answers": [{"case_id", "score", "total_ms",
    "engine_s", ...}, ...]}`` (other keys are kept for people, ignored here).
    Raises ``ConfigError`` naming what is missing."""
    try:
        answers = {
            str(row["case_id"]): StoredAnswer(
                case_id=str(row["case_id"]),
                score=float(row["score"]),
                total_ms=None if row.get("total_ms") is None else float(row["total_ms"]),
                engine_s=float(row.get("engine_s", 0.0)),
            )
            for row in data["answers"]
        }
        return TierPass(tier=str(data["tier"]), answers=answers)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a stored tier pass: missing or bad {exc}") from exc
