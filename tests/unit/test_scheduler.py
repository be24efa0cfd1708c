"""The worker's scheduler, sans-IO: events in, decisions out, on a fake clock.

No Redis, no Celery, no engine: each rule of docs/scheduling.md has a test here that
fails if the rule breaks.
"""

from __future__ import annotations

import pytest

from schemas.queues import Priority
from schemas.settings import TierConfig
from workers.scheduler import (
    MIN_RECENT_FIRST_TOKENS,
    GiveWay,
    Hold,
    HoldReason,
    ReadQueues,
    RecentFirstTokens,
    Requeue,
    Run,
    Scheduler,
    SchedulerInterface,
    SloShare,
    SlotShares,
    WaitBounds,
    giving_way,
    slot_shares,
    steered_share,
)

INTER, BATCH = Priority.INTERACTIVE, Priority.BATCH


def running(interactive: int, batch: int) -> dict[Priority, int]:
    return {INTER: interactive, BATCH: batch}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pause(*priorities: Priority) -> ReadQueues:
    return ReadQueues(pause=frozenset(priorities))


def resume(*priorities: Priority) -> ReadQueues:
    return ReadQueues(resume=frozenset(priorities))


NOTHING = ReadQueues()


def scheduler(shares: SlotShares, clock: Clock | None = None, **options: object) -> Scheduler:
    sched = Scheduler(shares, clock=clock or Clock(), **options)  # type: ignore[arg-type]
    sched.consumer_started()
    return sched


def reads(sched: Scheduler, *, batch_waiting: bool = True) -> ReadQueues:
    return sched.read_queues(lambda: batch_waiting)


# The shares of a worker's slots.


def test_batch_stops_at_the_slots_not_reserved_for_interactive_work() -> None:
    shares = SlotShares(slots=8, reserved_interactive=2, batch_min=1)
    assert shares.paused(running(0, 5), batch_waiting=True) == set()
    assert shares.paused(running(0, 6), batch_waiting=True) == {BATCH}
    assert shares.paused(running(2, 6), batch_waiting=True) == {BATCH}


def test_interactive_leaves_the_batch_minimum_only_while_batch_waits() -> None:
    shares = SlotShares(slots=8, reserved_interactive=2, batch_min=1)
    assert shares.paused(running(7, 0), batch_waiting=False) == set()
    assert shares.paused(running(7, 0), batch_waiting=True) == {INTER}
    assert shares.paused(running(7, 1), batch_waiting=True) == set()


def test_default_shares_keep_a_sixteenth_for_interactive_work() -> None:
    # No fixed share under interactive work: the SLO steers it.
    assert slot_shares(TierConfig(), 32) == SlotShares(32, 2, 1)
    assert slot_shares(TierConfig(), 16) == SlotShares(16, 1, 1)
    assert slot_shares(TierConfig(), 8) == SlotShares(8, 1, 1)
    assert slot_shares(TierConfig(), 2) == SlotShares(2, 1, 1)
    assert slot_shares(TierConfig(), 1) == SlotShares(1, 0, 1)
    assert slot_shares(TierConfig(batch_slots_under_interactive=2, batch_min_slots=3), 8) == (
        SlotShares(8, 1, 3, batch_under_interactive=3)
    )
    assert slot_shares(
        TierConfig(
            reserved_interactive_slots=3, batch_min_slots=0, batch_slots_under_interactive=0
        ),
        4,
    ) == SlotShares(4, 3, 0, batch_under_interactive=0)
    assert slot_shares(TierConfig(batch_slots_under_interactive=99), 16).batch_cap(True) == 15


def test_batch_holds_a_smaller_share_while_interactive_work_is_about() -> None:
    shares = SlotShares(slots=16, reserved_interactive=4, batch_min=1, batch_under_interactive=6)
    assert shares.paused(running(0, 6), batch_waiting=True) == set()
    assert shares.paused(running(0, 6), batch_waiting=True, interactive_about=True) == {BATCH}
    assert shares.paused(running(1, 5), batch_waiting=True, interactive_about=True) == set()


def test_batch_can_pause_entirely_while_interactive_work_is_about() -> None:
    config = TierConfig(batch_slots_under_interactive=0, batch_min_slots=0)
    shares = slot_shares(config, 8)
    assert shares.batch_cap(True) == 0
    assert shares.batch_cap(False) == 7
    assert shares.paused(running(0, 0), batch_waiting=True, interactive_about=True) == {BATCH}
    assert shares.paused(running(0, 0), batch_waiting=True) == set()
    # With the default minimum, a share of 0 still leaves batch one slot.
    assert slot_shares(TierConfig(batch_slots_under_interactive=0), 8).batch_cap(True) == 1


def test_impossible_shares_are_refused() -> None:
    with pytest.raises(ValueError, match="fewer than"):
        SlotShares(slots=4, reserved_interactive=4, batch_min=0)
    with pytest.raises(ValueError, match="batch minimum"):
        SlotShares(slots=4, reserved_interactive=2, batch_min=3)
    with pytest.raises(ValueError, match="under interactive"):
        SlotShares(slots=4, reserved_interactive=1, batch_min=2, batch_under_interactive=1)
    with pytest.raises(ValueError, match="negative"):
        Scheduler(SlotShares(4, 1, 1), batch_prefills_at_once=-1)


def test_a_share_that_is_no_share_pauses_batch() -> None:
    shares = SlotShares(8, 2, 0, batch_under_interactive=0)
    assert shares.batch_pauses
    assert not slot_shares(TierConfig(), 8).batch_pauses


# Which queues the worker reads.


def test_batch_s_queue_pauses_when_its_share_is_full_and_resumes_when_a_slot_frees() -> None:
    sched = scheduler(SlotShares(4, 1, 1))
    sched.message_received("b0", BATCH)
    sched.message_received("b1", BATCH)
    assert reads(sched) == NOTHING
    sched.message_received("b2", BATCH)
    assert reads(sched) == pause(BATCH)
    assert reads(sched) == NOTHING  # taken as carried out: not asked twice
    sched.job_ended("b0")
    assert reads(sched) == resume(BATCH)
    assert sched.running() == running(0, 2)


def test_batch_holds_what_people_leave_once_they_hold_their_reserved_slots() -> None:
    sched = scheduler(SlotShares(16, 4, 1))
    assert sched.batch_cap(running(3, 12)) == 12  # inside the reserve: all of batch_max
    assert sched.batch_cap(running(5, 11)) == 11  # 5 people + 11 batch jobs = 16 slots
    assert sched.batch_cap(running(10, 5)) == 6
    assert sched.batch_cap(running(16, 0)) == 0
    small = scheduler(SlotShares(4, 1, 1))
    for job in ("b0", "b1", "i0"):
        small.message_received(job, BATCH if job[0] == "b" else INTER)
    # One person in the one reserved slot: batch may still take the last slot.
    assert reads(small) == NOTHING
    small.message_received("i1", INTER)
    assert reads(small) == pause(BATCH)


def test_people_in_every_slot_leave_the_next_person_to_another_worker() -> None:
    sched = scheduler(SlotShares(4, 1, 0))
    for job in ("i0", "i1", "i2"):
        sched.message_received(job, INTER)
    assert reads(sched, batch_waiting=False) == NOTHING  # one slot left, for anyone
    # The worker's thread beyond its slots is for displacing a batch job; with none
    # to displace, the message would wait here instead of on a worker with room.
    sched.message_received("i3", INTER)
    assert reads(sched, batch_waiting=False) == pause(BATCH, INTER)
    sched.job_ended("i0")
    assert reads(sched, batch_waiting=False) == resume(BATCH, INTER)


def test_interactive_pauses_to_leave_batch_its_minimum_only_while_batch_waits() -> None:
    sched = scheduler(SlotShares(8, 2, 2))
    for index in range(6):
        sched.message_received(f"i{index}", INTER)
    asked: list[bool] = []

    def waiting(answer: bool) -> bool:
        asked.append(answer)
        return answer

    assert sched.read_queues(lambda: waiting(False)) == NOTHING
    assert asked == [False]  # crowded: the queue's depth was asked
    assert sched.read_queues(lambda: waiting(True)) == pause(INTER)
    sched.job_ended("i0")
    asked.clear()
    assert sched.read_queues(lambda: waiting(True)) == resume(INTER)
    assert asked == []  # not crowded: the depth is not asked


def test_the_smaller_share_lasts_the_hold_after_the_last_interactive_job() -> None:
    clock = Clock()
    shares = SlotShares(slots=8, reserved_interactive=2, batch_min=1, batch_under_interactive=2)
    sched = scheduler(shares, clock, interactive_hold_s=5)
    for index in range(3):
        sched.message_received(f"b{index}", BATCH)
    assert reads(sched) == NOTHING  # 3 of 6 batch slots: no interactive work about
    sched.message_received("i0", INTER)
    assert reads(sched) == pause(BATCH)
    clock.now += 1
    sched.job_ended("i0")
    sched.job_ended("b0")
    assert reads(sched) == NOTHING  # 2 batch jobs: still the small share
    clock.now += 4.9
    assert reads(sched) == NOTHING
    clock.now += 0.1  # the hold has passed
    assert reads(sched) == resume(BATCH)


def test_a_duplicate_message_holds_a_slot_of_its_own() -> None:
    sched = scheduler(SlotShares(4, 1, 1))
    sched.message_received("job", BATCH)
    sched.message_received("job", BATCH)
    assert sched.running() == running(0, 2)
    sched.job_ended("job")
    assert sched.running() == running(0, 1)
    sched.job_ended("job")
    sched.job_ended("job")  # nothing left to free
    assert sched.running() == running(0, 0)


def test_messages_celery_dropped_free_their_slots_at_a_tick() -> None:
    clock = Clock()
    sched = scheduler(SlotShares(4, 1, 1), clock)
    for index in range(2):  # received, then rejected by Celery before they could run
        sched.message_received(f"dropped{index}", BATCH)
    sched.message_received("runs", BATCH)
    assert reads(sched, batch_waiting=False) == pause(BATCH)  # the share looks full
    clock.now += WaitBounds().stale_after_s - 0.1
    assert sched.tick(known={"runs"}) == 0  # too fresh
    clock.now += 0.1
    assert sched.tick(known={"runs"}) == 2
    assert reads(sched, batch_waiting=False) == resume(BATCH)
    assert sched.running() == running(0, 1)


def test_a_restarted_consumer_reads_every_queue_again() -> None:
    sched = scheduler(SlotShares(4, 1, 1))
    for index in range(3):
        sched.message_received(f"b{index}", BATCH)
    assert reads(sched) == pause(BATCH)
    sched.consumer_started()  # a reconnect: kombu reads every queue again
    assert reads(sched) == pause(BATCH)


# Batch's share under interactive work, steered against the SLO.


def steered(clock: Clock) -> tuple[Scheduler, SloShare]:
    share = SloShare(low=1, high=6, ttft_slo_s=1.0, itl_slo_s=0.25, clock=clock)
    return scheduler(SlotShares(8, 2, 1), clock, interactive_hold_s=5, slo_share=share), share


def test_the_slo_share_sets_batch_s_cap_while_people_wait() -> None:
    clock = Clock()
    sched, _share = steered(clock)
    for index in range(6):
        sched.message_received(f"b{index}", BATCH)
    assert reads(sched) == pause(BATCH)  # all of batch_max
    assert sched.message_received("i0", INTER) == GiveWay(keep=6)  # the SLO holds
    cut = sched.first_token_measured(0.95)  # at risk: cut to 0.7 of the share
    assert cut is not None and cut.keep == 4 and cut.cut is not None
    assert (cut.cut.before, cut.cut.after) == (6, 4)
    assert sched.batch_cap(sched.running()) == 4
    assert sched.message_received("i1", INTER) == GiveWay(keep=4)
    clock.now += 10  # people gone past the hold: all of batch_max again
    sched.job_ended("i0")
    sched.job_ended("i1")
    clock.now += 6
    assert sched.batch_cap(sched.running()) == 6


def test_a_slow_inter_token_time_cuts_the_share_too() -> None:
    sched, share = steered(Clock())
    decision = sched.inter_token_measured(0.24)  # over 0.9 of the 0.25 s SLO
    assert decision is not None and decision.keep == 4 and share.cuts == 1
    assert sched.inter_token_measured(0.01) is None  # in the hold after a cut


def test_a_healthy_first_token_makes_nothing_give_way() -> None:
    sched, share = steered(Clock())
    assert sched.first_token_measured(0.1) is None
    assert share.cuts == 0


def test_without_giving_way_a_cut_halts_nothing() -> None:
    clock = Clock()
    share = SloShare(low=1, high=6, ttft_slo_s=1.0, itl_slo_s=0.25, clock=clock)
    sched = scheduler(SlotShares(8, 2, 1), clock, slo_share=share, batch_gives_way=False)
    assert sched.first_token_measured(5.0) is None
    assert share.cuts == 1  # the share is still cut: new batch jobs start less often
    assert sched.message_received("i0", INTER) is None


def test_a_fixed_share_wins_over_the_slo() -> None:
    share = SloShare(low=0, high=6, ttft_slo_s=1.0, itl_slo_s=0.25, clock=lambda: 0.0)
    sched = scheduler(SlotShares(8, 2, 1, batch_under_interactive=2), slo_share=share)
    sched.message_received("i0", INTER)
    assert sched.batch_cap(sched.running()) == 2
    assert sched.first_token_measured(5.0) is None  # nothing steers: nothing gives way
    assert (
        steered_share(TierConfig(batch_slots_under_interactive=2), sched.shares, clock=lambda: 0.0)
        is None
    )


def test_the_tier_s_slos_steer_the_share_between_its_minimum_and_maximum() -> None:
    shares = slot_shares(TierConfig(), 16)
    share = steered_share(
        TierConfig(interactive_ttft_slo_ms=500, interactive_itl_slo_ms=100),
        shares,
        clock=lambda: 0.0,
    )
    assert share is not None
    assert (share.low, share.high, share.ttft_slo_s, share.itl_slo_s) == (1, 15, 0.5, 0.1)


# Making batch give way.


def test_each_interactive_message_asks_batch_to_give_way() -> None:
    sched = scheduler(SlotShares(4, 1, 1))
    assert sched.message_received("b0", BATCH) is None
    # No smaller share, but people past their one reserved slot: batch keeps what they
    # leave (4 slots: 1 person -> batch keeps 3, 2 people -> 2, 3 people -> 1).
    assert sched.message_received("i0", INTER) == GiveWay(keep=3)
    assert sched.message_received("i1", INTER) == GiveWay(keep=2)
    assert sched.message_received("i2", INTER) == GiveWay(keep=1)


def test_the_youngest_batch_jobs_beyond_the_share_give_way() -> None:
    batch = [(1.0, "old"), (3.0, "young"), (2.0, "middle")]
    assert giving_way(batch, keep=1) == ["middle", "young"]
    assert giving_way(batch, keep=3) == []
    assert giving_way(batch, keep=-1) == ["old", "middle", "young"]


def test_a_job_that_gave_way_goes_back_on_the_same_attempt() -> None:
    sched = scheduler(SlotShares(4, 1, 1))
    assert sched.gave_way("b0") == Requeue("b0")


# Batch's turns where it pauses for people.


def pausing(clock: Clock, *, max_pause_s: float = 30.0) -> Scheduler:
    return scheduler(
        SlotShares(8, 2, 0, batch_under_interactive=0),
        clock,
        interactive_hold_s=5,
        batch_max_pause_s=max_pause_s,
    )


def test_batch_takes_a_turn_after_the_longest_pause_then_pauses_again() -> None:
    clock = Clock()
    sched = pausing(clock)
    assert sched.message_received("i0", INTER) == GiveWay(keep=0)
    assert reads(sched) == pause(BATCH)
    clock.now += 29
    assert reads(sched) == NOTHING  # not yet: 29 s without batch progress
    clock.now += 1
    assert reads(sched) == resume(BATCH)  # a turn is due
    sched.message_received("b0", BATCH)
    assert reads(sched) == pause(BATCH)  # the turn holds one slot, no more
    # The turn's job keeps running beside interactive work.
    assert sched.message_received("i1", INTER) == GiveWay(keep=1)
    clock.now += 1
    sched.job_ended("b0")
    assert reads(sched) == NOTHING  # progress: the next turn is 30 s away
    clock.now += 29
    assert reads(sched) == NOTHING
    clock.now += 1
    assert reads(sched) == resume(BATCH)


def test_the_turn_s_job_keeps_its_turn_when_another_batch_job_ends_meanwhile() -> None:
    clock = Clock()
    sched = pausing(clock)
    sched.message_received("b-old", BATCH)  # no interactive work: batch runs freely
    assert sched.message_received("i0", INTER) == GiveWay(keep=0)
    sched.batch_halted([])  # b-old was stopping already (a cancel): not halted
    clock.now += 30  # a turn is due
    sched.message_received("b-turn", BATCH)  # read before the batch queue paused
    sched.job_ended("b-old")  # an end that counts as progress
    # The turn is b-turn's until it ends: it is not halted for the next person.
    assert sched.message_received("i1", INTER) == GiveWay(keep=1)


def test_a_batch_job_halted_to_give_way_is_no_progress() -> None:
    clock = Clock()
    sched = pausing(clock)
    clock.now += 29
    sched.message_received("b0", BATCH)  # no interactive work: batch runs freely
    assert sched.message_received("i0", INTER) == GiveWay(keep=0)
    sched.batch_halted(["b0"])
    sched.job_ended("b0")  # halted, back in its queue
    assert reads(sched) == pause(BATCH)
    clock.now += 1
    assert reads(sched) == resume(BATCH)  # 30 s with no batch job done


def test_without_a_longest_pause_batch_waits_for_a_gap() -> None:
    clock = Clock()
    sched = pausing(clock, max_pause_s=0)
    sched.message_received("i0", INTER)
    assert reads(sched) == pause(BATCH)
    clock.now += 3600
    assert reads(sched) == NOTHING
    sched.job_ended("i0")
    clock.now += 5
    assert reads(sched) == resume(BATCH)


# Batch starts: after interactive first tokens, with a prefill place.


def test_a_batch_start_waits_while_an_interactive_request_waits_for_its_first_token() -> None:
    clock = Clock()
    sched = scheduler(SlotShares(4, 1, 1), clock)
    assert sched.batch_may_start(since=clock.now) == Run()
    ticket = sched.interactive_handed_over()
    clock.now += 0.2
    since = clock.now
    hold = sched.batch_may_start(since)
    assert hold == Hold(until=since + 1.0, reason=HoldReason.FIRST_TOKEN)
    sched.interactive_prefill_done(ticket)
    assert sched.batch_may_start(since) == Run()
    sched.interactive_prefill_done(ticket)  # again: nothing
    assert sched.awaiting_first_token() == 0


def test_a_batch_start_waits_no_longer_than_its_bound() -> None:
    clock = Clock()
    sched = scheduler(SlotShares(4, 1, 1), clock)
    sched.interactive_handed_over()
    since = clock.now
    clock.now += 0.99
    assert isinstance(sched.batch_may_start(since), Hold)
    clock.now += 0.01
    assert sched.batch_may_start(since) == Run()


def test_a_first_token_ticket_never_given_back_stops_counting() -> None:
    clock = Clock()
    bounds = WaitBounds(first_token_wait_s=10.0, first_token_ttl_s=5.0)
    sched = scheduler(SlotShares(4, 1, 1), clock, bounds=bounds)
    sched.interactive_handed_over()
    clock.now += 1
    since = clock.now
    assert sched.batch_may_start(since) == Hold(until=105.0, reason=HoldReason.FIRST_TOKEN)
    assert sched.awaiting_first_token() == 1
    clock.now = 105.0
    assert sched.batch_may_start(since) == Run()
    assert sched.awaiting_first_token() == 0


def test_batch_prompts_enter_prefill_one_at_a_time() -> None:
    clock = Clock()
    sched = scheduler(SlotShares(4, 1, 1), clock, batch_prefills_at_once=1)
    first = sched.batch_prefill_place(since=clock.now)
    assert isinstance(first, Run) and first.ticket is not None
    since = clock.now
    clock.now += 1
    assert sched.batch_prefill_place(since) == Hold(
        until=since + 10.0, reason=HoldReason.PREFILL_FULL
    )
    sched.batch_prefill_done(first.ticket)
    second = sched.batch_prefill_place(since)
    assert isinstance(second, Run) and second.ticket != first.ticket
    sched.batch_prefill_done(first.ticket)  # again: nothing
    assert sched.in_prefill() == 1


def test_no_prefill_limit_never_holds_and_a_wait_is_bounded() -> None:
    clock = Clock()
    unlimited = scheduler(SlotShares(4, 1, 1), clock)
    for _ in range(5):
        assert isinstance(unlimited.batch_prefill_place(since=clock.now), Run)
    assert unlimited.in_prefill() == 5
    bounded = scheduler(SlotShares(4, 1, 1), clock, batch_prefills_at_once=1)
    bounded.batch_prefill_place(since=clock.now)  # never given back
    since = clock.now
    clock.now += 9.9
    assert isinstance(bounded.batch_prefill_place(since), Hold)
    clock.now += 0.1
    assert isinstance(bounded.batch_prefill_place(since), Run)
    assert bounded.in_prefill() == 2


def test_a_prefill_place_never_given_back_stops_counting() -> None:
    clock = Clock()
    sched = scheduler(SlotShares(4, 1, 1), clock, batch_prefills_at_once=1)
    sched.batch_prefill_place(since=clock.now)
    clock.now += 1
    hold = sched.batch_prefill_place(since=clock.now)
    assert isinstance(hold, Hold) and hold.until == 111.0  # the wait's bound, before the TTL
    clock.now = 130.0
    assert isinstance(sched.batch_prefill_place(since=clock.now), Run)  # stale: no wait
    assert sched.in_prefill() == 1


# What the registry shows.


def test_a_few_first_tokens_do_not_make_a_median_yet() -> None:
    recent = RecentFirstTokens()
    for _ in range(MIN_RECENT_FIRST_TOKENS - 1):
        recent.record(1.0)
    assert recent.median() is None
    recent.record(1.0)
    assert recent.median() == 1.0


def test_the_snapshot_shows_the_share_the_slo_and_the_first_token_median() -> None:
    clock = Clock()
    sched, _share = steered(clock)
    for _ in range(MIN_RECENT_FIRST_TOKENS):
        sched.interactive_finished(0.2)
    sched.first_token_measured(0.95)
    assert sched.snapshot() == {
        "interactive_first_token_ms_p50": 200.0,
        "batch_under_interactive": 4,
        "interactive_ttft_slo_ms": 1000.0,
        "batch_share_cuts": 1,
    }
    fixed = scheduler(SlotShares(8, 2, 0, batch_under_interactive=0))
    assert fixed.snapshot() == {
        "interactive_first_token_ms_p50": None,
        "batch_under_interactive": 0,
    }


def test_the_scheduler_takes_every_event_of_its_interface() -> None:
    sched: SchedulerInterface = scheduler(SlotShares(4, 1, 1))
    assert sched.clock() == 100.0
