"""The scheduler's driver in job threads: real threads, short waits."""

from __future__ import annotations

import threading
import time

import pytest

from workers.running_jobs import RunningJob, RunningJobs, StopReason
from workers.scheduler import GiveWay, Scheduler, SlotShares, WaitBounds
from workers.scheduler_driver import SchedulerDriver, handing_over


def driver(**options: object) -> SchedulerDriver:
    return SchedulerDriver(Scheduler(SlotShares(4, 1, 1), **options))  # type: ignore[arg-type]


def test_with_no_interactive_request_waiting_a_batch_start_goes_at_once() -> None:
    drive = driver()
    started = time.monotonic()
    drive.batch_ticket()
    assert time.monotonic() - started < 0.5  # a wait would last the whole second


def test_a_batch_start_waits_for_the_first_token_then_goes() -> None:
    drive = driver()
    ticket = drive.interactive_ticket()
    threading.Timer(0.1, ticket.give_back).start()
    started = time.monotonic()
    drive.batch_ticket()
    assert 0.08 <= time.monotonic() - started < 1.0
    assert drive.scheduler.awaiting_first_token() == 0


def test_a_batch_start_waits_no_longer_than_its_bound() -> None:
    drive = driver(bounds=WaitBounds(first_token_wait_s=0.1))
    drive.interactive_ticket()
    started = time.monotonic()
    drive.batch_ticket()
    assert 0.08 <= time.monotonic() - started < 0.5


def test_a_ticket_never_given_back_stops_holding_batch_after_its_ttl() -> None:
    drive = driver(bounds=WaitBounds(first_token_ttl_s=0.1))
    drive.interactive_ticket()
    assert drive.scheduler.awaiting_first_token() == 1
    started = time.monotonic()
    drive.batch_ticket()
    assert time.monotonic() - started < 0.5
    assert drive.scheduler.awaiting_first_token() == 0


def test_giving_a_ticket_back_twice_releases_only_it() -> None:
    drive = driver()
    first, _second = drive.interactive_ticket(), drive.interactive_ticket()
    first.give_back()
    first.give_back()
    assert drive.scheduler.awaiting_first_token() == 1


def test_a_failed_hand_over_gives_its_ticket_back_and_a_good_one_keeps_it() -> None:
    drive = driver()
    kept = drive.interactive_ticket()
    with handing_over(kept):
        pass
    lost = drive.interactive_ticket()
    with pytest.raises(RuntimeError), handing_over(lost):
        raise RuntimeError("the engine refused the request")
    assert drive.scheduler.awaiting_first_token() == 1
    kept.give_back()
    assert drive.scheduler.awaiting_first_token() == 0


def test_a_batch_prompt_waits_for_the_one_in_prefill_to_reach_its_first_token() -> None:
    drive = driver(batch_prefills_at_once=1)
    first = drive.batch_ticket()
    taken = threading.Event()
    thread = threading.Thread(target=lambda: (drive.batch_ticket(), taken.set()))
    thread.start()
    assert not taken.wait(0.3)  # the first prompt is still in prefill
    first.give_back()
    assert taken.wait(2.0)
    thread.join()
    first.give_back()  # again: nothing
    assert drive.scheduler.in_prefill() == 1


def test_a_prefill_wait_is_bounded() -> None:
    drive = driver(batch_prefills_at_once=1, bounds=WaitBounds(prefill_wait_s=0.2))
    drive.batch_ticket()  # never given back
    started = time.monotonic()
    drive.batch_ticket()
    assert 0.15 <= time.monotonic() - started < 2.0
    assert drive.scheduler.in_prefill() == 2


def test_giving_way_halts_the_youngest_batch_jobs() -> None:
    drive = driver()
    jobs = RunningJobs()
    old = jobs.start("old", RunningJob(started=1.0), priority="batch")
    young = jobs.start("young", RunningJob(started=2.0), priority="batch")
    assert drive.give_way(None, jobs) == []
    assert drive.give_way(GiveWay(keep=1), jobs) == ["young"]
    assert young.reason is StopReason.YIELDED and old.reason is None
