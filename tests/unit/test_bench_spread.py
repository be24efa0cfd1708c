"""bench.spread: the 95% intervals printed beside the figures that goals judge."""

from __future__ import annotations

import numpy as np
import pytest

from bench.spread import difference_interval, percentile_interval, ratio_interval
from schemas.percentiles import median, percentile


def _normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).normal(mean, sd, n)]


def test_a_clear_shift_is_resolved_and_the_interval_holds_the_figure() -> None:
    base, other = _normal(50, 2, 30, 1), _normal(60, 2, 30, 2)
    low, high = difference_interval(base, other)
    assert 0 < low <= median(other) - median(base) <= high
    assert high - low < 5


def test_two_draws_of_one_distribution_are_not_told_apart() -> None:
    base, other = _normal(50, 10, 30, 3), _normal(50, 10, 30, 4)
    low, high = difference_interval(base, other)
    assert low < 0 < high


def test_noisier_samples_give_a_wider_interval() -> None:
    quiet = difference_interval(_normal(50, 1, 30, 5), _normal(52, 1, 30, 6))
    noisy = difference_interval(_normal(50, 15, 30, 5), _normal(52, 15, 30, 6))
    assert noisy[1] - noisy[0] > 5 * (quiet[1] - quiet[0])


def test_a_ratio_interval_of_a_p99_holds_the_ratio() -> None:
    idle, loaded = _normal(60, 5, 100, 7), _normal(90, 8, 100, 8)
    low, high = ratio_interval(idle, loaded, 99)
    assert low <= percentile(loaded, 99) / percentile(idle, 99) <= high
    assert low > 1.2 and high < 1.9


def test_the_same_samples_always_give_the_same_interval() -> None:
    base, other = _normal(50, 10, 30, 9), _normal(55, 10, 30, 10)
    assert difference_interval(base, other) == difference_interval(list(base), list(other))


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="both sides"):
        difference_interval([], [1.0])
    with pytest.raises(ValueError, match="both sides"):
        ratio_interval([1.0], [])


def test_one_sides_interval_holds_its_median_and_narrows_with_quieter_samples() -> None:
    quiet, noisy = _normal(4, 0.5, 30, 11), _normal(4, 5, 30, 11)
    low, high = percentile_interval(quiet)
    assert low <= median(quiet) <= high
    assert high - low < 1
    noisy_low, noisy_high = percentile_interval(noisy)
    assert noisy_high - noisy_low > 5 * (high - low)
    with pytest.raises(ValueError, match="needs samples"):
        percentile_interval([])
