from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy.exc import OperationalError

from schemas.retry import retry_call
from workers import jobs


def flaky(failures: int, result: bool = True) -> tuple[list[int], Callable[[], bool]]:
    """A write the database refuses ``failures`` times, then answers ``result``."""
    calls: list[int] = []

    def write() -> bool:
        calls.append(1)
        if len(calls) <= failures:
            raise OperationalError("UPDATE jobs", {}, Exception("server closed the connection"))
        return result

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


def test_the_retry_policy_waits_each_delay_then_raises() -> None:
    waits: list[float] = []
    calls, write = flaky(failures=10)
    with pytest.raises(OperationalError):
        retry_call(
            write, delays=(0.1, 0.2), retry_on=OperationalError, what="write", sleep=waits.append
        )
    assert waits == [0.1, 0.2]
    assert len(calls) == 3


def test_the_retry_policy_lets_other_errors_through() -> None:
    def broken() -> bool:
        raise KeyError("not an outage")

    with pytest.raises(KeyError):
        retry_call(broken, delays=(0.0,), retry_on=OperationalError, what="write")
