"""A job's end that the database refused through every quick retry is not dropped."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from schemas.timeouts import Timeouts
from tests.unit.test_db_retry import flaky
from workers import job_runner
from workers.deferred_writes import DeferredWrites


def test_a_refused_write_waits_and_lands_once_the_database_is_back() -> None:
    deferred = DeferredWrites()
    told: list[bool] = []
    calls, write = flaky(failures=2)
    deferred.add("record the result of job j1", write, then=told.append)
    assert deferred.flush() == 1
    assert deferred.flush() == 1
    assert told == []
    assert deferred.flush() == 0
    assert told == [True]
    assert deferred.flush() == 0
    assert len(calls) == 3  # never written again once it ran


def test_a_row_that_moved_on_ends_the_write_and_says_so() -> None:
    deferred = DeferredWrites()
    told: list[bool] = []
    _calls, write = flaky(failures=0, result=False)
    deferred.add("put job j2 back in its queue", write, then=told.append)
    assert deferred.flush() == 0
    assert told == [False]


def test_writes_still_refused_stay_in_their_order() -> None:
    deferred = DeferredWrites()
    order: list[str] = []

    def landing(name: str) -> Callable[[], bool]:
        def write() -> bool:
            order.append(name)
            return True

        return write

    _calls, refused = flaky(failures=10)
    deferred.add("a", refused)
    deferred.add("b", landing("b"))
    assert deferred.flush() == 1
    deferred.add("c", landing("c"))
    assert deferred.flush() == 1
    assert order == ["b", "c"]
    assert deferred.pending() == 1


def test_an_error_after_the_write_does_not_keep_it() -> None:
    deferred = DeferredWrites()

    def broken_then(_result: bool) -> None:
        raise RuntimeError("resend failed")

    _calls, write = flaky(failures=0)
    deferred.add("put job j3 back in its queue", write, then=broken_then)
    assert deferred.flush() == 0


def test_the_job_runner_hands_a_write_over_when_the_database_stays_down() -> None:
    runtime = runtime_retrying(0.0, 0.0)
    calls, write = flaky(failures=3)
    assert job_runner._record(runtime, write, what="record the end of job j4") is None
    assert len(calls) == 3  # the quick retries
    assert runtime.deferred.flush() == 0
    assert len(calls) == 4


def test_the_job_runner_keeps_nothing_when_the_write_lands() -> None:
    runtime = runtime_retrying(0.0)
    told: list[bool] = []
    _calls, write = flaky(failures=1)
    recorded = job_runner._record(
        runtime, write, what="put job j5 back in its queue", then=told.append
    )
    assert recorded is True
    assert runtime.deferred.pending() == 0
    assert told == [True]  # told at once, not after an outage


def runtime_retrying(*delays: float) -> Any:
    """A runtime whose settings retry a database write after each of ``delays``."""
    timeouts = Timeouts(db_retry_delays_s=delays)
    return SimpleNamespace(deferred=DeferredWrites(), settings=SimpleNamespace(timeouts=timeouts))
