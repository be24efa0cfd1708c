"""The scheduler's driver on Celery's consumer: messages and job ends in, queue
switches and halts out (a recording switch, no Celery)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from schemas.queues import BRPOP_TIMEOUT_S, Priority, Tier
from workers.consumer_step import PAUSED_POLL_S, ConsumerDriver, QueueSwitch
from workers.running_jobs import RunningJob, RunningJobs, StopReason
from workers.scheduler import Scheduler, SlotShares
from workers.scheduler_driver import SchedulerDriver

INTER, BATCH = Priority.INTERACTIVE, Priority.BATCH


class RecordingSwitch:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.later: list[Callable[[], None]] = []

    def pause(self, queue: str) -> None:
        self.calls.append(("pause", queue))

    def resume(self, queue: str) -> None:
        self.calls.append(("resume", queue))

    def soon(self, callback: Callable[[], None]) -> None:
        self.later.append(callback)

    def run_later(self) -> None:
        callbacks, self.later = self.later, []
        for callback in callbacks:
            callback()


def driver(
    shares: SlotShares,
    *,
    running: RunningJobs | None = None,
    batch_waiting: Callable[[], bool] = lambda: True,
) -> tuple[ConsumerDriver, RecordingSwitch]:
    drive = ConsumerDriver(
        Tier.SMALL,
        SchedulerDriver(Scheduler(shares)),
        running=running or RunningJobs(),
        batch_waiting=batch_waiting,
    )
    switch = RecordingSwitch()
    drive.attach(switch)
    return drive, switch


def test_the_driver_pauses_batch_when_full_and_resumes_it_on_the_consumer_thread() -> None:
    drive, switch = driver(SlotShares(4, 1, 1))
    for index in range(3):
        drive.received(f"b{index}", "llm.small.batch")
    assert switch.calls == [("pause", "llm.small.batch")]
    drive.received("m0", "llm.medium.interactive")  # another tier's: not counted
    drive.received("x", "not-a-queue")
    assert drive.scheduler.running() == {INTER: 0, BATCH: 3}
    drive.finished("b0")  # a task thread: the switch waits for the consumer thread
    assert switch.calls == [("pause", "llm.small.batch")]
    switch.run_later()
    assert switch.calls[-1] == ("resume", "llm.small.batch")


def test_before_the_consumer_exists_messages_are_counted_and_nothing_is_switched() -> None:
    drive = ConsumerDriver(
        Tier.SMALL,
        SchedulerDriver(Scheduler(SlotShares(4, 1, 1))),
        running=RunningJobs(),
        batch_waiting=lambda: True,
    )
    for index in range(3):
        drive.received(f"b{index}", "llm.small.batch")
    drive.finished("b0")
    drive.rebalance()
    assert drive.scheduler.running() == {INTER: 0, BATCH: 2}


def test_an_interactive_message_halts_the_batch_jobs_beyond_what_may_stay() -> None:
    jobs = RunningJobs()
    batch = [
        jobs.start(f"b{index}", RunningJob(started=float(index)), priority="batch")
        for index in range(3)
    ]
    drive, _switch = driver(SlotShares(4, 1, 1), running=jobs)
    for index in range(3):
        drive.received(f"b{index}", "llm.small.batch")
    drive.received("i0", "llm.small.interactive")
    # One person in the one reserved slot: the three batch jobs fill the rest.
    assert [job.reason for job in batch] == [None, None, None]
    drive.received("i1", "llm.small.interactive")
    # A second person (on the thread beyond the slots): the youngest gives way.
    assert [job.reason for job in batch] == [None, None, StopReason.YIELDED]


def test_the_timer_frees_stale_slots_and_reads_the_queues_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    shares = SlotShares(4, 1, 1)
    drive = ConsumerDriver(
        Tier.SMALL,
        SchedulerDriver(Scheduler(shares, clock=lambda: now[0])),
        running=RunningJobs(),
        batch_waiting=lambda: False,
    )
    switch = RecordingSwitch()
    drive.attach(switch)
    for job in ("dropped0", "dropped1", "runs"):
        drive.received(job, "llm.small.batch")
    assert switch.calls == [("pause", "llm.small.batch")]
    now[0] += 60
    with caplog.at_level(logging.WARNING):
        drive.tick({"runs"})
    assert "freed 2 slot(s)" in caplog.text
    assert switch.calls[-1] == ("resume", "llm.small.batch")


def test_a_queue_depth_that_cannot_be_read_counts_as_no_batch_waiting() -> None:
    def broken() -> bool:
        raise ConnectionError("redis is away")

    drive, switch = driver(SlotShares(8, 2, 2), batch_waiting=broken)
    for index in range(6):
        drive.received(f"i{index}", "llm.small.interactive")
    assert ("pause", "llm.small.interactive") not in switch.calls


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
