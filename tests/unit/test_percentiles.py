"""The one percentile every report uses: benchmarks, the quality gate, ``llmq top``."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.percentiles import median, percentile, percentile_or_none

samples = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=2, max_size=200)


@given(samples, st.integers(min_value=1, max_value=99))
def test_matches_the_inclusive_quantiles_the_benchmarks_reported_before(
    values: list[float], q: int
) -> None:
    # Figures stay comparable with earlier runs: same interpolation, now from numpy.
    before = statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    assert percentile(values, q) == pytest.approx(before, rel=1e-9, abs=1e-9)


@given(samples)
def test_the_median_is_the_50th_percentile(values: list[float]) -> None:
    assert median(values) == pytest.approx(statistics.median(values), rel=1e-9, abs=1e-9)
    assert median(iter(values)) == median(values)


def test_edges() -> None:
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([10.0, 20.0], 90) == pytest.approx(19.0)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_a_report_cell_is_rounded_or_empty() -> None:
    assert percentile_or_none([1.0, 2.0], 50, ndigits=1) == 1.5
    assert percentile_or_none([1.0, 1.234], 100, ndigits=2) == 1.23
    assert percentile_or_none(iter([2.0]), 50, ndigits=2) == 2.0
    assert percentile_or_none([], 95, ndigits=1) is None
