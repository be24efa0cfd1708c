"""How a worker's slots are shared between interactive and batch work."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from schemas.queues import BRPOP_TIMEOUT_S, Priority, Tier
from schemas.settings import TierConfig
from workers.capacity import PAUSED_POLL_S, STALE_AFTER_S, QueueSwitch, SlotGate
from workers.scheduler import SloShare
from workers.shares import MIN_RECENT_FIRST_TOKENS, RecentFirstTokens, SlotShares, slot_shares

INTER, BATCH = Priority.INTERACTIVE, Priority.BATCH


def running(interactive: int, batch: int) -> dict[Priority, int]:
    return {INTER: interactive, BATCH: batch}


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


def test_default_shares_keep_a_quarter_for_interactive_work() -> None:
    # No fixed share under interactive work: the SLO steers it (workers.scheduler).
    assert slot_shares(TierConfig(), 16) == SlotShares(16, 4, 1)
    assert slot_shares(TierConfig(), 8) == SlotShares(8, 2, 1)
    assert slot_shares(TierConfig(), 2) == SlotShares(2, 1, 1)
    assert slot_shares(TierConfig(), 1) == SlotShares(1, 0, 1)
    assert slot_shares(TierConfig(batch_slots_under_interactive=2, batch_min_slots=3), 8) == (
        SlotShares(8, 2, 3, batch_under_interactive=3)
    )
    assert slot_shares(
        TierConfig(
            reserved_interactive_slots=3, batch_min_slots=0, batch_slots_under_interactive=0
        ),
        4,
    ) == SlotShares(4, 3, 0, batch_under_interactive=0)
    assert slot_shares(TierConfig(batch_slots_under_interactive=99), 16).batch_cap(True) == 12


def test_batch_holds_a_smaller_share_while_interactive_work_is_about() -> None:
    shares = SlotShares(slots=16, reserved_interactive=4, batch_min=1, batch_under_interactive=6)
    assert shares.paused(running(0, 6), batch_waiting=True) == set()
    assert shares.paused(running(0, 6), batch_waiting=True, interactive_about=True) == {BATCH}
    assert shares.paused(running(1, 5), batch_waiting=True, interactive_about=True) == set()


def test_batch_can_pause_entirely_while_interactive_work_is_about() -> None:
    config = TierConfig(batch_slots_under_interactive=0, batch_min_slots=0)
    shares = slot_shares(config, 8)
    assert shares.batch_cap(True) == 0
    assert shares.batch_cap(False) == 6
    assert shares.paused(running(0, 0), batch_waiting=True, interactive_about=True) == {BATCH}
    assert shares.paused(running(0, 0), batch_waiting=True) == set()
    # With the default minimum, a share of 0 still leaves batch one slot.
    assert slot_shares(TierConfig(batch_slots_under_interactive=0), 8).batch_cap(True) == 1


def test_the_smaller_share_lasts_the_hold_after_the_last_interactive_job() -> None:
    now = [100.0]
    shares = SlotShares(slots=8, reserved_interactive=2, batch_min=1, batch_under_interactive=2)
    gate = SlotGate(
        Tier.SMALL, shares, batch_waiting=lambda: True, interactive_hold_s=5, clock=lambda: now[0]
    )
    switch = RecordingSwitch()
    gate.attach(switch)
    for index in range(3):
        gate.received(f"b{index}", "llm.small.batch")
    assert switch.calls == []  # 3 of 6 batch slots: no interactive work about
    gate.received("i0", "llm.small.interactive")
    assert switch.calls == [("pause", "llm.small.batch")]
    now[0] += 1
    gate.finished("i0")
    gate.finished("b0")
    assert switch.calls == [("pause", "llm.small.batch")]  # 2 batch jobs: still the small share
    now[0] += 5  # the hold has passed
    gate.rebalance()
    assert switch.calls[-1] == ("resume", "llm.small.batch")


def test_impossible_shares_are_refused() -> None:
    with pytest.raises(ValueError, match="fewer than"):
        SlotShares(slots=4, reserved_interactive=4, batch_min=0)
    with pytest.raises(ValueError, match="batch minimum"):
        SlotShares(slots=4, reserved_interactive=2, batch_min=3)
    with pytest.raises(ValueError, match="under interactive"):
        SlotShares(slots=4, reserved_interactive=1, batch_min=2, batch_under_interactive=1)


class RecordingSwitch:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def pause(self, queue: str) -> None:
        self.calls.append(("pause", queue))

    def resume(self, queue: str) -> None:
        self.calls.append(("resume", queue))

    def soon(self, callback: Callable[[], None]) -> None:
        callback()


def test_the_gate_pauses_batch_when_full_and_resumes_it_when_a_slot_frees() -> None:
    gate = SlotGate(Tier.SMALL, SlotShares(4, 1, 1), batch_waiting=lambda: True)
    switch = RecordingSwitch()
    gate.attach(switch)
    for index in range(3):
        gate.received(f"b{index}", "llm.small.batch")
    assert switch.calls == [("pause", "llm.small.batch")]
    gate.received("i0", "llm.small.interactive")
    gate.received("x", "not-a-queue")
    gate.finished("b0")
    # A person holds the one reserved slot: batch keeps the last free slot free.
    assert switch.calls[-1] == ("pause", "llm.small.batch")
    gate.finished("b1")
    assert switch.calls[-1] == ("resume", "llm.small.batch")
    assert gate.running() == {INTER: 1, BATCH: 1}


def test_messages_celery_dropped_after_counting_free_their_slots() -> None:
    gate = SlotGate(Tier.SMALL, SlotShares(4, 1, 1), batch_waiting=lambda: False)
    switch = RecordingSwitch()
    gate.attach(switch)
    for index in range(2):  # received, then rejected by Celery before they could run
        gate.received(f"dropped{index}", "llm.small.batch")
    gate.received("runs", "llm.small.batch")
    assert switch.calls == [("pause", "llm.small.batch")]  # the batch share looks full
    later = time.monotonic() + STALE_AFTER_S + 1
    assert gate.prune(lambda task_id: False, now=time.monotonic()) == 0  # too fresh
    assert gate.prune(lambda task_id: task_id == "runs", now=later) == 2
    gate.rebalance()
    assert switch.calls[-1] == ("resume", "llm.small.batch")
    assert gate.running() == {INTER: 0, BATCH: 1}
    gate.finished("runs")
    assert gate.running() == {INTER: 0, BATCH: 0}


def test_each_interactive_message_asks_batch_to_give_way() -> None:
    calls: list[str] = []
    gate = SlotGate(
        Tier.SMALL,
        SlotShares(4, 1, 1),
        batch_waiting=lambda: False,
        on_interactive=lambda keep: calls.append(f"give way, keep {keep}") or [],
    )
    gate.received("b0", "llm.small.batch")
    gate.received("m0", "llm.medium.interactive")  # another tier's: not ours
    assert calls == []
    gate.received("i0", "llm.small.interactive")
    gate.received("i1", "llm.small.interactive")
    # No smaller share, but people past their one reserved slot: one slot stays free
    # for the next person (4 slots: 1 person -> batch keeps 2, 2 people -> 1).
    assert calls == ["give way, keep 2", "give way, keep 1"]


def test_batch_leaves_a_free_slot_once_people_hold_their_reserved_ones() -> None:
    gate = SlotGate(Tier.SMALL, SlotShares(16, 4, 1), batch_waiting=lambda: True)
    assert gate.batch_cap(running(3, 12)) == 12  # inside the reserve: all of batch_max
    assert gate.batch_cap(running(4, 12)) == 11  # 4 + 11 + one free slot = 16
    assert gate.batch_cap(running(10, 5)) == 5
    assert gate.batch_cap(running(16, 0)) == 0


class FakeTaskConsumer:
    """The slice of kombu's Consumer that QueueSwitch drives."""

    def __init__(self, queues: list[str]) -> None:
        self.channel = SimpleNamespace(brpop_timeout=BRPOP_TIMEOUT_S)
        self.queues = list(queues)

    def cancel_by_queue(self, queue: str) -> None:
        self.queues.remove(queue)

    def consuming_from(self, queue: str) -> bool:
        return queue in self.queues

    def add_queue(self, queue: SimpleNamespace) -> None:
        self.queues.append(queue.name)

    def consume(self) -> None:
        pass


def test_the_worker_polls_quickly_while_a_queue_is_paused() -> None:
    order = ["llm.small.interactive", "llm.small.batch"]
    task_consumer = FakeTaskConsumer(order)
    consumer = SimpleNamespace(
        task_consumer=task_consumer,
        app=SimpleNamespace(
            amqp=SimpleNamespace(queues={name: SimpleNamespace(name=name) for name in order})
        ),
    )
    switch = QueueSwitch(consumer, order)
    switch.pause("llm.small.batch")
    assert task_consumer.channel.brpop_timeout == PAUSED_POLL_S
    switch.pause("llm.small.interactive")
    switch.resume("llm.small.interactive")
    # Batch is still paused: its resume must still be picked up quickly.
    assert task_consumer.channel.brpop_timeout == PAUSED_POLL_S
    switch.resume("llm.small.batch")
    assert task_consumer.channel.brpop_timeout == BRPOP_TIMEOUT_S
    assert task_consumer.queues == order


def test_a_few_first_tokens_do_not_make_a_median_yet() -> None:
    recent = RecentFirstTokens()
    for _ in range(MIN_RECENT_FIRST_TOKENS - 1):
        recent.record(1.0)
    assert recent.median() is None
    recent.record(1.0)
    assert recent.median() == 1.0


class SteeredGate:
    """A gate whose batch share under interactive work follows the SLO (fake clock)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.kept: list[int] = []
        self.switch = RecordingSwitch()
        self.share = SloShare(low=1, high=6, ttft_slo_s=1.0, itl_slo_s=0.25, clock=lambda: self.now)
        self.gate = SlotGate(
            Tier.SMALL,
            SlotShares(8, 2, 1),
            batch_waiting=lambda: True,
            interactive_hold_s=5,
            clock=lambda: self.now,
            on_interactive=lambda keep: self.kept.append(keep) or [],
            steered=self.share,
        )
        self.gate.attach(self.switch)


def test_the_slo_share_sets_batch_s_cap_while_people_wait() -> None:
    lab = SteeredGate()
    for index in range(6):
        lab.gate.received(f"b{index}", "llm.small.batch")
    assert lab.switch.calls == [("pause", "llm.small.batch")]  # all of batch_max
    lab.gate.received("i0", "llm.small.interactive")
    assert lab.kept == [6]  # the SLO holds: nothing gives way
    lab.share.first_token(0.95)  # at risk: the share is cut to 0.7 of itself
    assert lab.gate.batch_cap(lab.gate.running()) == 4
    lab.gate.received("i1", "llm.small.interactive")
    assert lab.kept == [6, 4]
    lab.now += 10  # healthy again, and people gone past the hold: all of batch_max
    lab.gate.finished("i0")
    lab.gate.finished("i1")
    lab.now += 6
    assert lab.gate.batch_cap(lab.gate.running()) == 6


def test_a_fixed_share_wins_over_the_slo() -> None:
    share = SloShare(low=0, high=6, ttft_slo_s=1.0, itl_slo_s=0.25, clock=lambda: 0.0)
    gate = SlotGate(
        Tier.SMALL,
        SlotShares(8, 2, 1, batch_under_interactive=2),
        batch_waiting=lambda: True,
        steered=share,
    )
    gate.received("i0", "llm.small.interactive")
    assert gate.batch_cap(gate.running()) == 2


def test_a_share_that_is_no_share_pauses_batch() -> None:
    shares = SlotShares(8, 2, 0, batch_under_interactive=0)
    assert shares.batch_pauses
    assert not slot_shares(TierConfig(), 8).batch_pauses


class PausingGate:
    """A gate whose batch pauses while interactive work is about, on a fake clock."""

    def __init__(self, *, max_pause_s: float = 30.0) -> None:
        self.now = 100.0
        self.kept: list[int] = []
        self.halt: list[str] = []
        self.switch = RecordingSwitch()
        self.gate = SlotGate(
            Tier.SMALL,
            SlotShares(8, 2, 0, batch_under_interactive=0),
            batch_waiting=lambda: True,
            interactive_hold_s=5,
            batch_max_pause_s=max_pause_s,
            clock=lambda: self.now,
            on_interactive=self._give_way,
        )
        self.gate.attach(self.switch)

    def _give_way(self, keep: int) -> list[str]:
        self.kept.append(keep)
        halted, self.halt = self.halt, []
        return halted

    def batch_paused(self) -> bool:
        return self.switch.calls[-1] == ("pause", "llm.small.batch")


def test_batch_takes_a_turn_after_the_longest_pause_then_pauses_again() -> None:
    lab = PausingGate()
    lab.gate.received("i0", "llm.small.interactive")
    assert lab.batch_paused() and lab.kept == [0]
    lab.now += 29
    lab.gate.rebalance()
    assert lab.batch_paused()  # not yet: 29 s without batch progress
    lab.now += 1
    lab.gate.rebalance()
    assert lab.switch.calls[-1] == ("resume", "llm.small.batch")  # a turn is due
    lab.gate.received("b0", "llm.small.batch")
    assert lab.batch_paused()  # the turn holds one slot, no more
    lab.gate.received("i1", "llm.small.interactive")
    assert lab.kept == [0, 1]  # the turn's job keeps running beside interactive work
    lab.now += 1
    lab.gate.finished("b0")
    assert lab.batch_paused()  # progress: the next turn is 30 s away
    lab.now += 29
    lab.gate.rebalance()
    assert lab.batch_paused()


def test_a_batch_job_halted_to_give_way_is_no_progress() -> None:
    lab = PausingGate()
    lab.now += 29
    lab.gate.received("b0", "llm.small.batch")  # no interactive work: batch runs freely
    lab.halt = ["b0"]
    lab.gate.received("i0", "llm.small.interactive")
    lab.gate.finished("b0")  # halted, back in its queue
    lab.now += 1
    lab.gate.rebalance()
    assert lab.switch.calls[-1] == ("resume", "llm.small.batch")  # 30 s with no batch job done


def test_without_a_longest_pause_batch_waits_for_a_gap() -> None:
    lab = PausingGate(max_pause_s=0)
    lab.gate.received("i0", "llm.small.interactive")
    lab.now += 3600
    lab.gate.rebalance()
    assert lab.batch_paused()
    lab.gate.finished("i0")
    lab.now += 5
    lab.gate.rebalance()
    assert lab.switch.calls[-1] == ("resume", "llm.small.batch")
