"""How far a bench's comparison could move by chance: bootstrap intervals.

A host shared with other tenants moves one side's first tokens by tens of percent
between samples, so a p50 difference of 3 ms from 30 samples a side may be noise. Each
comparison a goal judges (overhead's added milliseconds, peer's ratios, priority's p99
ratio) is printed with a 95% interval beside it: both sides' samples are resampled with
replacement, the figure recomputed each time, and the middle 95% of those figures kept.

The samples are taken as independent. Samples of one engine start share that start's
placement on the cores, so where starts differ (the bench prints each block) the real
uncertainty is wider than the interval: it shows the least a figure could move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

CONFIDENCE = 0.95
RESAMPLES = 4000
SEED = 0
"""Fixed, so the same samples always print the same interval."""

Combine = Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], npt.NDArray[np.float64]]


def difference_interval(
    base: Sequence[float], other: Sequence[float], q: float = 50
) -> list[float]:
    """95% interval of ``percentile(other, q) - percentile(base, q)``."""
    return _interval(base, other, q, np.subtract)


def ratio_interval(base: Sequence[float], other: Sequence[float], q: float = 50) -> list[float]:
    """95% interval of ``percentile(other, q) / percentile(base, q)``."""
    return _interval(base, other, q, np.divide)


def percentile_interval(values: Sequence[float], q: float = 50) -> list[float]:
    """95% interval of ``percentile(values, q)``: one side's figure, such as a
    difference taken within each sample."""
    if not values:
        raise ValueError("an interval needs samples")
    return _middle(_resampled(np.random.default_rng(SEED), values, q))


def _interval(
    base: Sequence[float], other: Sequence[float], q: float, combine: Combine
) -> list[float]:
    if not base or not other:
        raise ValueError("an interval needs samples on both sides")
    rng = np.random.default_rng(SEED)
    return _middle(combine(_resampled(rng, other, q), _resampled(rng, base, q)))


def _middle(figures: npt.NDArray[np.float64]) -> list[float]:
    """The middle ``CONFIDENCE`` of ``figures``, as [low, high]."""
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(figures, [tail, 100 - tail])
    return [round(float(low), 3), round(float(high), 3)]


def _resampled(
    rng: np.random.Generator, values: Sequence[float], q: float
) -> npt.NDArray[np.float64]:
    """The ``q``-th percentile of each of ``RESAMPLES`` resamples of ``values``."""
    samples = np.asarray(values, dtype=float)
    draws = rng.choice(samples, size=(RESAMPLES, samples.size), replace=True)
    return np.asarray(np.percentile(draws, q, axis=1), dtype=float)
