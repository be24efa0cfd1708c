"""Requests started on a message's receipt wait for their task, and no longer than that."""

from __future__ import annotations

from workers.received_starts import UNTAKEN_AFTER_S, ReceivedStarts


class Started:
    def __init__(self, name: str) -> None:
        self.name = name
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_task_takes_what_was_started_for_its_job_oldest_first() -> None:
    starts: ReceivedStarts[Started] = ReceivedStarts()
    first, second, other = Started("first"), Started("second"), Started("other")
    starts.put("job-a", first)
    starts.put("job-a", second)
    starts.put("job-b", other)
    assert starts.take("job-a") is first
    assert starts.take("job-a") is second
    assert starts.take("job-a") is None
    assert len(starts) == 1
    assert not any(s.aborted for s in (first, second, other))


def test_a_request_no_task_took_in_time_is_aborted_at_the_next_receipt() -> None:
    clock = Clock()
    starts: ReceivedStarts[Started] = ReceivedStarts(clock=clock)
    forgotten = Started("forgotten")
    starts.put("job-a", forgotten)
    clock.now += UNTAKEN_AFTER_S - 1
    starts.put("job-b", Started("fresh"))
    assert not forgotten.aborted
    clock.now += 1
    starts.put("job-c", Started("newer"))
    assert forgotten.aborted
    assert starts.take("job-a") is None
    assert len(starts) == 2
