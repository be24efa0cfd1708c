"""Which running batch jobs give way when batch must shrink to ``keep`` jobs."""

from __future__ import annotations

from collections.abc import Iterable


def giving_way(batch: Iterable[tuple[float, str]], keep: int) -> list[str]:
    """The ids of the batch jobs beyond the ``keep`` that started first, given each
    running batch job as ``(started, job_id)``: the youngest have the least to redo."""
    ordered = sorted(batch, key=lambda entry: entry[0])
    return [job_id for _started, job_id in ordered[max(keep, 0) :]]
