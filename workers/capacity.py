"""Reserved capacity: the gate that keeps each priority within its share of slots.

The shares themselves (``workers.shares``): batch work never takes the slots kept for
interactive work, and while interactive work is about holds what the interactive SLO
leaves it (``workers.scheduler.slo_share``), or a fixed share the tier sets.

The gate acts where messages leave Redis: when a share is used up, the worker stops
reading that queue (kombu cancels its consumer) and reads it again once a slot of
that share is free. Nothing is taken that cannot start, so no urgent job ever waits
behind a prefetched batch message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, ClassVar, Protocol

from schemas.queues import (
    BRPOP_TIMEOUT_S,
    Priority,
    Tier,
    parse_queue_name,
    queue_name,
    tier_queues,
)
from workers.scheduler.slo_share import SloShare
from workers.shares import SlotShares

log = logging.getLogger(__name__)

# A counted message that Celery neither runs nor holds this long after it was received
# was dropped on the way (a reject for an unreadable ETA, say): its slot is freed, or a
# few such messages would stop the worker from reading its queues at all.
STALE_AFTER_S = 10.0
PRUNE_INTERVAL_S = 5.0


class Switch(Protocol):
    """Stops and restarts reading a queue."""

    def pause(self, queue: str) -> None: ...

    def resume(self, queue: str) -> None: ...

    def soon(self, callback: Callable[[], None]) -> None: ...


# A resumed queue joins only the worker's *next* BRPOP: one already waiting on the
# other queues runs out its timeout first. While a queue is paused the worker polls
# with this short timeout, so a freed slot is filled within it (the measurement that
# chose it is in docs/scheduling.md, "Interactive first").
PAUSED_POLL_S = 0.01


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


class BatchTurns:
    """Batch's turns while it pauses for interactive work: once ``max_pause_s`` pass
    without a batch job ending, one batch job may run to its end, so batch work
    progresses even under an interactive stream that never leaves a gap.

    A job halted to give way is no progress: it goes back to its queue unfinished.
    """

    def __init__(self, max_pause_s: float, clock: Callable[[], float]) -> None:
        self._max_pause_s = max_pause_s
        self._clock = clock
        self._lock = threading.Lock()
        self._progress_at = clock()
        self._turn: str | None = None
        self._halted: set[str] = set()

    def due(self) -> bool:
        """A turn's job runs, or batch has waited ``max_pause_s`` for one."""
        if self._max_pause_s <= 0:
            return False
        with self._lock:
            waited = self._clock() - self._progress_at
            return self._turn is not None or waited >= self._max_pause_s

    def started(self, task_id: str) -> None:
        """A batch job was taken while batch pauses: it is the turn's, if one is due."""
        if self.due():
            with self._lock:
                self._turn = self._turn or task_id

    def halted(self, task_ids: Collection[str]) -> None:
        with self._lock:
            self._halted.update(task_ids)

    def ended(self, task_id: str) -> None:
        with self._lock:
            if task_id == self._turn:
                self._turn = None
            if task_id in self._halted:
                self._halted.discard(task_id)
                return
            self._progress_at = self._clock()


class SlotGate:
    """Counts running jobs by priority and pauses or resumes their queues to match.

    ``on_interactive`` hears each interactive message with how many batch jobs may keep
    running, and returns the ids of those it halted. ``steered``, where the shares fix
    no batch share under interactive work, sizes that share against the SLO.
    """

    def __init__(
        self,
        tier: Tier,
        shares: SlotShares,
        *,
        batch_waiting: Callable[[], bool],
        interactive_hold_s: float = 0.0,
        batch_max_pause_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_interactive: Callable[[int], Collection[str]] | None = None,
        steered: SloShare | None = None,
    ) -> None:
        self.tier = tier
        self._steered = steered if shares.batch_under_interactive is None else None
        self._on_interactive = on_interactive
        self.shares = shares
        self._batch_waiting = batch_waiting
        self._hold_s = interactive_hold_s
        self._clock = clock
        self._turns = BatchTurns(batch_max_pause_s, clock)
        self._interactive_seen = -float("inf")
        self._lock = threading.Lock()
        self._running = {priority: 0 for priority in Priority}
        self._jobs: dict[str, list[Priority]] = {}
        self._received_at: dict[str, float] = {}
        self._paused: set[Priority] = set()
        self._switch: Switch | None = None

    def attach(self, switch: Switch) -> None:
        """Start gating through ``switch`` (once the worker's consumer exists)."""
        self._switch = switch
        self._paused = set()

    def running(self) -> dict[Priority, int]:
        with self._lock:
            return dict(self._running)

    def received(self, task_id: str, routing_key: str) -> None:
        """A message was taken (consumer thread): count it, then gate before the next read."""
        try:
            tier, priority = parse_queue_name(routing_key)
        except ValueError:
            return
        if tier != self.tier:
            return
        if priority is Priority.BATCH and self._batch_paused(self.running()):
            self._turns.started(task_id)
        with self._lock:
            # A job's id is its task id, and a duplicate message of a job (a re-send)
            # may be in flight beside it: each message holds a slot until it ends.
            self._jobs.setdefault(task_id, []).append(priority)
            self._received_at[task_id] = time.monotonic()
            self._running[priority] += 1
            if priority is Priority.INTERACTIVE:
                self._interactive_seen = self._clock()
        if priority is Priority.INTERACTIVE and self._on_interactive is not None:
            self._turns.halted(self._on_interactive(self.batch_cap(self.running())))
        self.rebalance()

    def finished(self, task_id: str) -> None:
        """A job ended (task thread): free its slot; the consumer thread re-gates."""
        with self._lock:
            held = self._jobs.get(task_id)
            if not held:
                return
            priority = held.pop()
            if not held:
                del self._jobs[task_id]
                self._received_at.pop(task_id, None)
            self._running[priority] -= 1
            if priority is Priority.INTERACTIVE:
                self._interactive_seen = self._clock()
        if priority is Priority.BATCH:
            self._turns.ended(task_id)
        if self._switch is not None:
            self._switch.soon(self.rebalance)

    def prune(self, known: Callable[[str], bool], *, now: float | None = None) -> int:
        """Free the slots of messages Celery no longer knows (``known`` says which it
        does) that were received over ``STALE_AFTER_S`` ago; return how many."""
        now = time.monotonic() if now is None else now
        freed = 0
        with self._lock:
            for task_id, received_at in list(self._received_at.items()):
                if now - received_at < STALE_AFTER_S or known(task_id):
                    continue
                for priority in self._jobs.pop(task_id, []):
                    self._running[priority] -= 1
                    freed += 1
                del self._received_at[task_id]
        if freed:
            log.warning("freed %d slot(s) of messages that never ran", freed)
        return freed

    def rebalance(self) -> None:
        """Pause and resume queues to match the shares; consumer thread only."""
        switch = self._switch
        if switch is None:
            return
        running = self.running()
        wanted = self.shares.paused(
            running, self._waiting_batch(running), batch_cap=self.batch_cap(running)
        )
        for priority in wanted - self._paused:
            switch.pause(queue_name(self.tier, priority))
        for priority in self._paused - wanted:
            switch.resume(queue_name(self.tier, priority))
        if wanted != self._paused:
            log.debug("queues paused: %s (running %s)", sorted(wanted), running)
        self._paused = wanted

    def batch_cap(self, running: dict[Priority, int]) -> int:
        """How many batch jobs may run now: what the SLO leaves while interactive work
        is about (where it steers the share), and never the last free slot once people
        hold their reserved ones; one on a turn while batch pauses."""
        if self._batch_paused(running):
            return 1 if self._turns.due() else 0
        about = self.interactive_about(running)
        if about and self._steered is not None:
            cap = min(self._steered.share(), self.shares.batch_max)
        else:
            cap = self.shares.batch_cap(about)
        interactive = running[Priority.INTERACTIVE]
        if interactive >= self.shares.reserved_interactive:
            # People past their reserved slots: batch keeps one slot free for the next
            # person, whose message is not even read while every slot is taken (the
            # wait before the claim, in the queue, that no share of the SLO can see).
            cap = min(cap, max(self.shares.slots - interactive - 1, 0))
        return cap

    def _batch_paused(self, running: dict[Priority, int]) -> bool:
        return self.shares.batch_pauses and self.interactive_about(running)

    def interactive_about(self, running: dict[Priority, int]) -> bool:
        """Interactive work runs, or ended less than ``interactive_hold_s`` ago.

        The hold keeps batch's share small between the requests of an interactive
        stream: batch jobs already running finish at their own pace, so a share that
        sprang back at each gap would never shrink.
        """
        if running[Priority.INTERACTIVE] > 0:
            return True
        with self._lock:
            seen = self._interactive_seen
        return self._clock() - seen < self._hold_s

    def _waiting_batch(self, running: dict[Priority, int]) -> bool:
        # Only asked when interactive work is about to crowd batch out.
        if not self.shares.crowded(running):
            return False
        try:
            return self._batch_waiting()
        except Exception:
            log.warning("could not read the batch queue's depth", exc_info=True)
            return False


def install_gate(app: Any, gate: SlotGate) -> None:
    """Make ``app``'s worker consult ``gate``: a consumer step plus two task signals."""
    from celery import bootsteps
    from celery.signals import task_postrun, task_received
    from celery.worker import state as worker_state

    class GateStep(bootsteps.StartStopStep):  # type: ignore[misc]
        requires: ClassVar[set[str]] = {"celery.worker.consumer.tasks:Tasks"}

        def start(self, consumer: Any) -> None:
            # Also after a reconnect: the consumer then reads every queue again.
            switch = QueueSwitch(consumer, tier_queues(gate.tier))
            gate.attach(switch)
            gate.rebalance()

            def prune_then_rebalance() -> None:
                # Also when nothing was pruned: batch's share grows back once the
                # interactive hold has passed.
                gate.prune(lambda task_id: task_id in worker_state.requests)
                gate.rebalance()

            consumer.timer.call_repeatedly(
                PRUNE_INTERVAL_S, lambda: switch.soon(prune_then_rebalance)
            )

    def on_received(request: Any = None, **_: Any) -> None:
        if request is not None:
            gate.received(request.id, (request.delivery_info or {}).get("routing_key") or "")

    def on_postrun(task_id: str | None = None, **_: Any) -> None:
        if task_id is not None:
            gate.finished(task_id)

    app.steps["consumer"].add(GateStep)
    task_received.connect(on_received, weak=False)
    task_postrun.connect(on_postrun, weak=False)
