from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.exc import OperationalError

from workers import jobs


def flaky(failures: int) -> tuple[list[int], Callable[[], bool]]:
    calls: list[int] = []

    def write() -> bool:
        calls.append(1)
        if len(calls) <= failures:
            raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))
        return True

    return calls, write


def test_a_short_outage_is_retried_until_the_write_lands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "DB_RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    calls, write = flaky(failures=2)
    assert jobs.with_db_retry(write, what="record a result") is True
    assert len(calls) == 3


def test_a_long_outage_gives_up_after_the_last_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "DB_RETRY_DELAYS_S", (0.0, 0.0))
    calls, write = flaky(failures=10)
    assert jobs.with_db_retry(write, what="record a result") is None
    assert len(calls) == 3
