"""The scheduler's driver on Celery's consumer: which queues the worker reads.

Each message taken from this worker's tier's queues, each job's end and a timer are
events for the worker's :class:`~workers.scheduler.Scheduler`; its ``ReadQueues``
decisions are carried out where messages leave Redis: when a share is used up, the
worker stops reading that queue (kombu cancels its consumer) and reads it again once a
slot of that share is free. Nothing is taken that cannot start, so no urgent job ever
waits behind a prefetched batch message. Its ``GiveWay`` decisions halt running batch
jobs (``workers.scheduler_driver``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import Any, ClassVar, Protocol

from schemas.queues import BRPOP_TIMEOUT_S, Tier, parse_queue_name, queue_name, tier_queues
from workers.running_jobs import RunningJobs
from workers.scheduler_driver import SchedulerDriver

log = logging.getLogger(__name__)

# Not a setting: the scheduler's timer, part of its algorithm (the hold and the pause
# it checks are the tier's settings).
TICK_INTERVAL_S = 5.0
"""How often the timer ticks: stale slots are freed, and batch's share grows back once
the interactive hold has passed even when no message or job end says so."""

# Not a setting: part of the scheduler's refill of a freed slot.
# A resumed queue joins only the worker's *next* BRPOP: one already waiting on the
# other queues runs out its timeout first. While a queue is paused the worker polls
# with this short timeout, so a freed slot is filled within it (the measurement that
# chose it is in docs/scheduling.md, "Interactive first").
PAUSED_POLL_S = 0.01


class Switch(Protocol):
    """Stops and restarts reading a queue."""

    def pause(self, queue: str) -> None: ...

    def resume(self, queue: str) -> None: ...

    def soon(self, callback: Callable[[], None]) -> None: ...


class QueueSwitch:
    """The Celery consumer's :class:`Switch`; called on the consumer's own thread."""

    def __init__(self, consumer: Any, order: list[str]) -> None:
        self._consumer = consumer
        self._order = order
        self._paused: set[str] = set()

    def pause(self, queue: str) -> None:
        self._consumer.task_consumer.cancel_by_queue(queue)
        self._paused.add(queue)
        self._poll_quickly(True)

    def resume(self, queue: str) -> None:
        self._paused.discard(queue)
        self._poll_quickly(bool(self._paused))
        task_consumer = self._consumer.task_consumer
        if task_consumer.consuming_from(queue):
            return
        # kombu reads queues in the order they were added: re-add the ones that come
        # after this one, or a resumed interactive queue would be read after batch.
        later = self._order[self._order.index(queue) + 1 :]
        later = [name for name in later if task_consumer.consuming_from(name)]
        for name in later:
            task_consumer.cancel_by_queue(name)
        for name in [queue, *later]:
            task_consumer.add_queue(self._consumer.app.amqp.queues[name])
        task_consumer.consume()

    def soon(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the consumer's thread (kombu channels are not thread-safe)."""
        self._consumer.call_soon(callback)

    def _poll_quickly(self, quickly: bool) -> None:
        # kombu's Redis channel reads brpop_timeout each time it sends a BRPOP.
        channel = self._consumer.task_consumer.channel
        channel.brpop_timeout = PAUSED_POLL_S if quickly else BRPOP_TIMEOUT_S


class ConsumerDriver:
    """Turns the consumer's happenings into the scheduler's events, and carries out
    what it decides: queue switches through a :class:`Switch`, halts through
    ``running``. ``batch_waiting`` says whether batch messages wait in the queue."""

    def __init__(
        self,
        tier: Tier,
        scheduling: SchedulerDriver,
        *,
        running: RunningJobs,
        batch_waiting: Callable[[], bool],
    ) -> None:
        self.tier = tier
        self.scheduler = scheduling.scheduler
        self._scheduling = scheduling
        self._running = running
        self._batch_waiting = batch_waiting
        self._switch: Switch | None = None

    def attach(self, switch: Switch) -> None:
        """Start switching queues through ``switch`` (once the worker's consumer exists)."""
        self._switch = switch
        self.scheduler.consumer_started()

    def received(self, task_id: str, routing_key: str) -> None:
        """A message was taken (consumer thread): an event if it is this tier's, then
        the queues are switched before the next read."""
        try:
            tier, priority = parse_queue_name(routing_key)
        except ValueError:
            return
        if tier != self.tier:
            return
        self._scheduling.give_way(self.scheduler.message_received(task_id, priority), self._running)
        self.rebalance()

    def finished(self, task_id: str) -> None:
        """A job ended (task thread): its slot is free; the consumer thread re-reads."""
        self.scheduler.job_ended(task_id)
        if self._switch is not None:
            self._switch.soon(self.rebalance)

    def tick(self, known: Container[str]) -> None:
        """The timer (consumer thread): ``known`` holds the ids of messages Celery has."""
        freed = self.scheduler.tick(known)
        if freed:
            log.warning("freed %d slot(s) of messages that never ran", freed)
        # Also when nothing was freed: batch's share grows back once the interactive
        # hold has passed.
        self.rebalance()

    def rebalance(self) -> None:
        """Pause and resume queues as the scheduler decides; consumer thread only."""
        switch = self._switch
        if switch is None:
            return
        change = self.scheduler.read_queues(self._waiting_batch)
        for priority in change.pause:
            switch.pause(queue_name(self.tier, priority))
        for priority in change.resume:
            switch.resume(queue_name(self.tier, priority))
        if change:
            log.debug("queues paused: +%s -%s", sorted(change.pause), sorted(change.resume))

    def _waiting_batch(self) -> bool:
        try:
            return self._batch_waiting()
        except Exception:
            log.warning("could not read the batch queue's depth", exc_info=True)
            return False


def install_driver(app: Any, driver: ConsumerDriver) -> None:
    """Make ``app``'s worker drive ``driver``: a consumer step plus two task signals."""
    from celery import bootsteps
    from celery.signals import task_postrun, task_received
    from celery.worker import state as worker_state

    class SchedulerStep(bootsteps.StartStopStep):  # type: ignore[misc]
        requires: ClassVar[set[str]] = {"celery.worker.consumer.tasks:Tasks"}

        def start(self, consumer: Any) -> None:
            # Also after a reconnect: the consumer then reads every queue again.
            switch = QueueSwitch(consumer, tier_queues(driver.tier))
            driver.attach(switch)
            driver.rebalance()
            consumer.timer.call_repeatedly(
                TICK_INTERVAL_S,
                lambda: switch.soon(lambda: driver.tick(worker_state.requests)),
            )

    def on_received(request: Any = None, **_: Any) -> None:
        if request is not None:
            driver.received(request.id, (request.delivery_info or {}).get("routing_key") or "")

    def on_postrun(task_id: str | None = None, **_: Any) -> None:
        if task_id is not None:
            driver.finished(task_id)

    app.steps["consumer"].add(SchedulerStep)
    task_received.connect(on_received, weak=False)
    task_postrun.connect(on_postrun, weak=False)
