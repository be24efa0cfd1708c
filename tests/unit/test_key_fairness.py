"""The per-key active-job count: off the request's path once a key was counted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from producer.gateway import fairness as fairness_module
from producer.gateway.errors import GatewayError
from producer.gateway.fairness import KeyFairness
from schemas.errors import DatabaseUnavailable


class TableCounts:
    """Stands in for the job table's COUNT: answers in turn, records each call."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, _sessions: Any, _key_id: str) -> int:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def fairness(limit: int) -> KeyFairness:
    return KeyFairness(
        sessions=lambda: None,  # type: ignore[arg-type, return-value]
        redis=lambda: None,  # type: ignore[arg-type, return-value]
        max_active_jobs=limit,
        max_open_streams=1,
        stream_lease_s=60.0,
    )


@pytest.fixture
def stale_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every count is over a second old by the time the next submit looks.
    monkeypatch.setattr(fairness_module, "ACTIVE_COUNT_FRESH_S", 0.0)


@pytest.mark.usefixtures("stale_at_once")
def test_a_stale_count_is_renewed_after_the_submit_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = TableCounts(3, 1)
    monkeypatch.setattr(fairness_module, "count_active_jobs", table)
    limits = fairness(10)

    async def scenario() -> tuple[int, int, int]:
        async with limits.submitting("key"):  # the key's first submit: counted now
            pass
        first = table.calls
        await asyncio.sleep(0.05)  # the renewal the stale count asked for
        async with limits.submitting("key"):
            during = table.calls  # the submit itself did not wait for a count
        await asyncio.sleep(0.05)
        return first, during, table.calls

    first, during, after = asyncio.run(scenario())
    assert first == 1
    assert during == 2  # only the background renewal ran since
    assert after == 3


@pytest.mark.usefixtures("stale_at_once")
def test_a_key_that_looks_at_its_limit_is_counted_afresh_before_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = TableCounts(1, 2, 5)
    monkeypatch.setattr(fairness_module, "count_active_jobs", table)
    limits = fairness(2)

    async def scenario() -> None:
        async with limits.submitting("key"):  # 1 active + this one: at the limit, allowed
            pass
        await asyncio.sleep(0.05)  # renewed: 2 active
        async with limits.submitting("key"):  # 2 + 1 > 2: counted afresh (5), refused
            raise AssertionError("admitted over the limit")

    with pytest.raises(GatewayError, match="limit is 2"):
        asyncio.run(scenario())
    assert table.calls == 3


@pytest.mark.usefixtures("stale_at_once")
def test_a_failed_renewal_keeps_the_count_and_serves_on(monkeypatch: pytest.MonkeyPatch) -> None:
    table = TableCounts(0, DatabaseUnavailable("down"), 0)
    monkeypatch.setattr(fairness_module, "count_active_jobs", table)
    limits = fairness(10)

    async def scenario() -> int:
        admitted = 0
        for _ in range(3):
            async with limits.submitting("key"):
                admitted += 1
            await asyncio.sleep(0.05)
        return admitted

    assert asyncio.run(scenario()) == 3
