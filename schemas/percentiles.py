"""The one percentile every figure is reported with: benchmarks, the quality gate's
report and ``llmq top`` alike.

Linear interpolation between the two nearest samples (numpy's default method, the same
as ``statistics.quantiles(method="inclusive")``), so figures stay comparable across
reports and with earlier runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``.

    Raises ``ValueError`` when there are no values.
    """
    samples = np.fromiter(values, dtype=float)
    if samples.size == 0:
        raise ValueError("a percentile of no values")
    return float(np.percentile(samples, q))


def median(values: Iterable[float]) -> float:
    """The 50th :func:`percentile`; raises ``ValueError`` when there are no values."""
    return percentile(values, 50)


def percentile_or_none(values: Iterable[float], q: float, *, ndigits: int) -> float | None:
    """The ``q``-th :func:`percentile` rounded to ``ndigits``, or None without values
    (a report's empty cell, not an error)."""
    samples = list(values)
    return round(percentile(samples, q), ndigits) if samples else None
