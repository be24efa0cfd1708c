"""Paired statistics of an A/B quality gate, and its verdict.

Both variants answer the same cases, so their scores are paired: the difference is
estimated from the pairs, not from two independent samples (arXiv 2411.00640). With
right/wrong scores the gate uses Wilson intervals per variant and Tango's score interval
for the paired difference (Tango 1998), which stays honest at small n and when every
answer agrees (no flips in 20 cases still allows a flip rate near 16%); with graded
scores (similarity without a pass mark) it uses a seeded paired bootstrap. Flips
(cases one variant gets right and the other wrong) are counted as well: accuracy can
hold while many answers change (arXiv 2407.09141).

Quality figures are fractions in [0, 1]; the threshold is in percentage points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

DEFAULT_THRESHOLD_POINTS = 3.0
"""Reject B when it may be more than this many points worse than A."""

DEFAULT_CONFIDENCE = 0.95
MIN_CASES = 10
"""Below this many pairs the gate never decides."""

BOOTSTRAP_RESAMPLES = 2000
RIGHT = 0.5
"""A graded score at or above this counts as right when flips are counted."""

Verdict = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class PairedResult:
    """One case's score under A and under B (bool, or a float in [0, 1])."""

    case_id: str
    a: bool | float
    b: bool | float


class Interval(BaseModel):
    """A point estimate with its confidence interval."""

    model_config = ConfigDict(frozen=True)

    value: float
    low: float
    high: float


class Flips(BaseModel):
    """Cases whose right/wrong outcome differs between the variants."""

    model_config = ConfigDict(frozen=True)

    a_only: int
    """Right under A, wrong under B (B lost them)."""
    b_only: int
    """Right under B, wrong under A (B gained them)."""
    rate: float
    """(a_only + b_only) / n."""


class GateResult(BaseModel):
    """What the gate concludes about B against A on paired cases."""

    model_config = ConfigDict(frozen=True)

    n: int
    confidence: float
    method: Literal["wilson-tango", "paired-bootstrap"]
    a: Interval
    b: Interval
    delta: Interval
    """B - A, as a fraction (0.03 is 3 points)."""
    flips: Flips
    mcnemar_p: float | None
    """Exact McNemar two-sided p-value on the flips (right/wrong scores only)."""
    threshold_points: float
    verdict: Verdict
    cases_needed: int | None
    """For an inconclusive verdict: about how many cases would decide it at the observed
    rates (None when it is decided, or when no number of cases would be enough)."""
    reason: str


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(successes: int, n: int, *, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Wilson score interval of a proportion (0/0 gives the whole [0, 1])."""
    if n == 0:
        return Interval(value=0.0, low=0.0, high=1.0)
    z = _z(confidence)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return Interval(value=p, low=round(low, 12), high=round(high, 12))


def newcombe_paired(
    both: int, b_only: int, a_only: int, neither: int, *, confidence: float = DEFAULT_CONFIDENCE
) -> Interval:
    """Interval of p_B - p_A from paired right/wrong counts (Newcombe 1998, method 10).

    Kept for comparison: with no discordant pairs it collapses to a point, so the gate
    uses :func:`tango_paired`.
    """
    n = both + b_only + a_only + neither
    if n == 0:
        return Interval(value=0.0, low=-1.0, high=1.0)
    p1, p2 = (both + b_only) / n, (both + a_only) / n
    w1 = wilson(both + b_only, n, confidence=confidence)
    w2 = wilson(both + a_only, n, confidence=confidence)
    product = (both + b_only) * (a_only + neither) * (both + a_only) * (b_only + neither)
    phi = (both * neither - b_only * a_only) / math.sqrt(product) if product else 0.0
    d1, e1 = p1 - w1.low, w1.high - p1
    d2, e2 = p2 - w2.low, w2.high - p2
    delta = math.sqrt(max(0.0, d1 * d1 - 2 * phi * d1 * e2 + e2 * e2))
    epsilon = math.sqrt(max(0.0, e1 * e1 - 2 * phi * e1 * d2 + d2 * d2))
    theta = p1 - p2
    return Interval(value=theta, low=max(-1.0, theta - delta), high=min(1.0, theta + epsilon))


def _tango_statistic(delta: float, b: int, c: int, n: int) -> float:
    """Tango's score statistic for p_B - p_A = ``delta`` (b: B-only right, c: A-only)."""
    w = -b - c + (2 * n - b + c) * delta
    q = (math.sqrt(max(0.0, w * w + 8 * n * c * delta * (1 - delta))) - w) / (4 * n)
    variance = n * (2 * q + delta * (1 - delta))
    numerator = b - c - n * delta
    if variance <= 0:
        return math.copysign(math.inf, numerator) if numerator else 0.0
    return numerator / math.sqrt(variance)


def tango_paired(
    both: int, b_only: int, a_only: int, neither: int, *, confidence: float = DEFAULT_CONFIDENCE
) -> Interval:
    """Score interval of p_B - p_A from paired right/wrong counts (Tango 1998).

    It depends on the discordant pairs and n, and stays honest when the variants agree
    on every case: with none of n cases flipped, a flip rate up to about z^2/(n + z^2)
    is still possible, so the interval is that wide, not a point.
    """
    n = both + b_only + a_only + neither
    if n == 0:
        return Interval(value=0.0, low=-1.0, high=1.0)
    z = _z(confidence)
    theta = (b_only - a_only) / n

    def solve(low: float, high: float, target: float) -> float:
        # The statistic falls as delta rises; bisect for where it crosses ``target``.
        for _ in range(80):
            middle = (low + high) / 2
            if _tango_statistic(middle, b_only, a_only, n) > target:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    lower = -1.0 if _tango_statistic(-1.0, b_only, a_only, n) <= z else solve(-1.0, theta, z)
    upper = 1.0 if _tango_statistic(1.0, b_only, a_only, n) >= -z else solve(theta, 1.0, -z)
    return Interval(value=theta, low=min(lower, theta), high=max(upper, theta))


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value (binomial test on the discordant pairs)."""
    discordant = a_only + b_only
    if discordant == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(discordant, i) for i in range(k + 1)) / float(2**discordant)
    return min(1.0, 2 * tail)


def _bootstrap(
    a: np.ndarray, b: np.ndarray, *, confidence: float, seed: int
) -> tuple[Interval, Interval, Interval]:
    rng = np.random.default_rng(seed)
    n = len(a)
    picks = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))
    alpha = (1 - confidence) / 2

    def interval(values: np.ndarray, samples: np.ndarray) -> Interval:
        low, high = np.quantile(samples, [alpha, 1 - alpha])
        return Interval(value=float(values.mean()), low=float(low), high=float(high))

    return (
        interval(a, a[picks].mean(axis=1)),
        interval(b, b[picks].mean(axis=1)),
        interval(b - a, (b - a)[picks].mean(axis=1)),
    )


def _cases_needed(n: int, delta: Interval, threshold: float) -> int | None:
    """Pairs needed for the interval to clear ``-threshold``, if widths shrink as 1/sqrt(n)."""
    if delta.value > -threshold:
        distance, half = delta.value + threshold, delta.value - delta.low
    elif delta.value < -threshold:
        distance, half = -threshold - delta.value, delta.high - delta.value
    else:
        return None
    if distance <= 0 or half <= 0:
        return None
    return max(n + 1, math.ceil(n * (half / distance) ** 2), MIN_CASES)


MAX_CASES_NEEDED = 1_000_000


def _pairs_needed(
    counts: tuple[int, int, int, int], threshold: float, confidence: float
) -> int | None:
    """Smallest number of pairs, at the observed rates, whose Tango interval decides."""
    n = sum(counts)
    if n == 0:
        return None

    def decided(m: int) -> bool:
        scaled = [round(count * m / n) for count in counts]
        interval = tango_paired(*scaled, confidence=confidence)
        return interval.low > -threshold or interval.high < -threshold

    high = n + 1
    while not decided(high):
        if high > MAX_CASES_NEEDED:
            return None
        high *= 2
    low = max(n, high // 2)
    while high - low > 1:
        middle = (low + high) // 2
        if decided(middle):
            high = middle
        else:
            low = middle
    return max(high, MIN_CASES)


def paired_gate(
    results: Sequence[PairedResult] | Sequence[tuple[bool | float, bool | float]],
    *,
    threshold_points: float = DEFAULT_THRESHOLD_POINTS,
    confidence: float = DEFAULT_CONFIDENCE,
    min_cases: int = MIN_CASES,
    seed: int = 0,
) -> GateResult:
    """Compare B with A on paired scores and give the verdict.

    ``results`` holds one pair per case (:class:`PairedResult` or ``(a, b)``), each score
    a bool or a float in [0, 1]. The verdict is ``pass`` when the lower bound of B - A is
    above ``-threshold_points`` (points, so 3.0 is 0.03), ``fail`` when the upper bound
    is below it, ``inconclusive`` otherwise or with fewer than ``min_cases`` pairs.
    Raises ``ValueError`` for a score outside [0, 1] or a bad threshold or confidence.
    """
    if not 0 < confidence < 1:
        raise ValueError("confidence must be between 0 and 1")
    if threshold_points < 0:
        raise ValueError("the threshold is a number of points, zero or more")
    pairs = [(r.a, r.b) if isinstance(r, PairedResult) else r for r in results]
    a = np.array([float(x) for x, _ in pairs], dtype=np.float64)
    b = np.array([float(y) for _, y in pairs], dtype=np.float64)
    if pairs and (min(a.min(), b.min()) < 0 or max(a.max(), b.max()) > 1):
        raise ValueError("scores must lie in [0, 1]")
    n = len(pairs)
    binary = bool(np.all((a == 0) | (a == 1)) and np.all((b == 0) | (b == 1)))
    right_a, right_b = a >= RIGHT, b >= RIGHT
    a_only = int(np.sum(right_a & ~right_b))
    b_only = int(np.sum(right_b & ~right_a))
    flips = Flips(a_only=a_only, b_only=b_only, rate=(a_only + b_only) / n if n else 0.0)
    if binary or n == 0:
        both = int(np.sum(right_a & right_b))
        neither = n - both - a_only - b_only
        qa = wilson(both + a_only, n, confidence=confidence)
        qb = wilson(both + b_only, n, confidence=confidence)
        delta = tango_paired(both, b_only, a_only, neither, confidence=confidence)
        method: Literal["wilson-tango", "paired-bootstrap"] = "wilson-tango"
        p_value: float | None = mcnemar_exact(a_only, b_only)
        counts: tuple[int, int, int, int] | None = (both, b_only, a_only, neither)
    else:
        qa, qb, delta = _bootstrap(a, b, confidence=confidence, seed=seed)
        method, p_value, counts = "paired-bootstrap", None, None
    threshold = threshold_points / 100
    needed: int | None = None
    verdict: Verdict
    if n < min_cases:
        verdict = "inconclusive"
        needed = min_cases
        if n and counts is not None:
            needed = max(min_cases, _pairs_needed(counts, threshold, confidence) or 0)
        reason = f"{n} paired cases; the gate decides from {min_cases}"
    elif delta.low > -threshold:
        verdict = "pass"
        reason = f"B - A lower bound {100 * delta.low:+.1f} points is above -{threshold_points:g}"
    elif delta.high < -threshold:
        verdict = "fail"
        reason = f"B - A upper bound {100 * delta.high:+.1f} points is below -{threshold_points:g}"
    else:
        verdict = "inconclusive"
        needed = (
            _pairs_needed(counts, threshold, confidence)
            if counts is not None
            else _cases_needed(n, delta, threshold)
        )
        reason = (
            f"B - A interval [{100 * delta.low:+.1f}, {100 * delta.high:+.1f}] points "
            f"contains -{threshold_points:g}"
        )
    return GateResult(
        n=n,
        confidence=confidence,
        method=method,
        a=qa,
        b=qb,
        delta=delta,
        flips=flips,
        mcnemar_p=p_value,
        threshold_points=threshold_points,
        verdict=verdict,
        cases_needed=needed,
        reason=reason,
    )
