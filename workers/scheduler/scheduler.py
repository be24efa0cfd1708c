"""One worker's scheduling: the policy and its state, sans-IO.

Events come in as method calls named after what happened (a message was received, a
job ended, an interactive request reached its first token, the timer ticked); the
answers are decisions (``workers.scheduler.decisions``): run, hold, read or stop
reading a queue, make batch give way, requeue. Drivers translate Celery's, kombu's and
the engine's happenings into these events and carry the decisions out
(``workers.consumer_step`` on Celery's consumer thread, ``workers.scheduler_driver``
in the job threads). Nothing here touches Redis, Celery or the engine, blocks, or
reads the wall clock: time comes from the clock it is given.

The rules, each kept in one place:

- **Slots.** Batch jobs hold at most ``shares.batch_max`` slots; while interactive work
  is about (runs, or ran in the last ``interactive_hold_s``) batch holds what the SLO
  leaves (``slo_share``) or the tier's fixed share; once people hold their reserved
  slots, batch holds what they leave (the next person's message is read on a job
  thread beyond the slots, and displaces a batch job then); while batch jobs wait,
  interactive work leaves them ``batch_min`` slots (``read_queues``).
- **Turns.** Where batch pauses for people, one batch job may run after
  ``batch_max_pause_s`` without batch progress (``workers.scheduler.turns``).
- **Giving way.** Each interactive message, and each cut of the SLO share, halts the
  batch jobs beyond what may run beside people (where the tier lets batch give way).
- **Batch starts.** A batch job reaches the engine only once no interactive request
  waits for its first token (at most ``first_token_wait_s``), and only with a prefill
  place (``batch_prefills_at_once`` at once; at most ``prefill_wait_s``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Container
from dataclasses import dataclass

from schemas.queues import Priority
from schemas.settings import TierConfig
from workers.scheduler.decisions import GiveWay, Hold, HoldReason, ReadQueues, Requeue, Run
from workers.scheduler.first_tokens import RecentFirstTokens
from workers.scheduler.holders import Holders
from workers.scheduler.interface import SchedulerInterface
from workers.scheduler.slo_share import ShareChange, SloShare
from workers.scheduler.slots import SlotShares
from workers.scheduler.turns import BatchTurns


@dataclass(frozen=True)
class WaitBounds:
    """How long the scheduler's holds and counts last; none may stall work for long."""

    first_token_wait_s: float = 1.0
    """The longest a batch job's start waits for interactive first tokens (far above
    an interactive first token's SLO)."""
    first_token_ttl_s: float = 5.0
    """An interactive request still before its first token after this long no longer
    holds batch back."""
    prefill_wait_s: float = 10.0
    """The longest a batch job waits for a prefill place: pacing must never stall it."""
    prefill_ttl_s: float = 30.0
    """A prefill place never given back stops counting after this long."""
    stale_after_s: float = 10.0
    """A counted message that Celery neither runs nor holds this long after it was
    received was dropped on the way (a reject for an unreadable ETA, say): its slot is
    freed, or a few such messages would stop the worker from reading its queues."""


def steered_share(
    config: TierConfig, shares: SlotShares, *, clock: Callable[[], float]
) -> SloShare | None:
    """Batch's share under interactive work, steered against the tier's SLOs; None
    where the tier fixes it (``batch_slots_under_interactive``)."""
    if shares.batch_under_interactive is not None:
        return None
    return SloShare(
        low=shares.batch_min,
        high=shares.batch_max,
        ttft_slo_s=config.interactive_ttft_slo_ms / 1000.0,
        itl_slo_s=config.interactive_itl_slo_ms / 1000.0,
        clock=clock,
    )


class Scheduler:
    """A worker's scheduling policy and state. Thread-safe; never blocks, no I/O.

    ``shares``: the worker's slots and their shares. ``slo_share``: batch's share while
    interactive work is about, steered against the SLO (ignored where ``shares`` fixes
    that share). ``batch_gives_way``: running batch jobs halt for people (else they
    finish first). ``batch_prefills_at_once``: batch prompts in prefill at once (0: no
    limit; raises ``ValueError`` if negative).
    """

    def __init__(
        self,
        shares: SlotShares,
        *,
        clock: Callable[[], float] = time.monotonic,
        interactive_hold_s: float = 0.0,
        batch_max_pause_s: float = 0.0,
        batch_gives_way: bool = True,
        slo_share: SloShare | None = None,
        batch_prefills_at_once: int = 0,
        bounds: WaitBounds | None = None,
    ) -> None:
        if batch_prefills_at_once < 0:
            raise ValueError("the limit of batch prefills must not be negative")
        self.shares = shares
        self.slo_share = slo_share if shares.batch_under_interactive is None else None
        self.bounds = bounds or WaitBounds()
        self.batch_prefills_at_once = batch_prefills_at_once
        self.recent_first_tokens = RecentFirstTokens()
        self._clock = clock
        self._hold_s = interactive_hold_s
        self._gives_way = batch_gives_way
        self._turns = BatchTurns(batch_max_pause_s, clock)
        self._lock = threading.Lock()
        self._interactive_seen = -float("inf")
        self._running = {priority: 0 for priority in Priority}
        self._jobs: dict[str, list[Priority]] = {}
        self._received_at: dict[str, float] = {}
        self._paused: set[Priority] = set()
        self._awaiting_first_token = Holders(self.bounds.first_token_ttl_s)
        self._in_prefill = Holders(self.bounds.prefill_ttl_s)

    @property
    def clock(self) -> Callable[[], float]:
        """The clock every time the scheduler hands out is on."""
        return self._clock

    # The Celery consumer's events (``workers.consumer_step``).

    def consumer_started(self) -> None:
        """The consumer (re)started and reads every queue: no queue is paused now."""
        with self._lock:
            self._paused = set()

    def message_received(self, job_id: str, priority: Priority) -> GiveWay | None:
        """A message of this worker's tier was taken: it holds a slot until its job ends.
        For an interactive one, the batch jobs beyond what may run beside it give way."""
        if priority is Priority.BATCH and self._batch_paused(self.running()):
            self._turns.started(job_id)
        now = self._clock()
        with self._lock:
            # A job's id is its task id, and a duplicate message of a job (a re-send)
            # may be in flight beside it: each message holds a slot until it ends.
            self._jobs.setdefault(job_id, []).append(priority)
            self._received_at[job_id] = now
            self._running[priority] += 1
            if priority is Priority.INTERACTIVE:
                self._interactive_seen = now
        if priority is Priority.INTERACTIVE and self._gives_way:
            return GiveWay(keep=self.batch_cap(self.running()))
        return None

    def batch_halted(self, job_ids: Collection[str]) -> None:
        """These batch jobs were halted to give way: their ends are no batch progress."""
        self._turns.halted(job_ids)

    def job_ended(self, job_id: str) -> None:
        """A job's task ended: its message's slot is free (``read_queues`` to refill it)."""
        with self._lock:
            held = self._jobs.get(job_id)
            if not held:
                return
            priority = held.pop()
            if not held:
                del self._jobs[job_id]
                self._received_at.pop(job_id, None)
            self._running[priority] -= 1
            if priority is Priority.INTERACTIVE:
                self._interactive_seen = self._clock()
        if priority is Priority.BATCH:
            self._turns.ended(job_id)

    def tick(self, known: Container[str]) -> int:
        """The timer: free the slots of messages Celery no longer knows (``known`` holds
        those it does) that were received over ``stale_after_s`` ago; how many."""
        now = self._clock()
        freed = 0
        with self._lock:
            for job_id, received_at in list(self._received_at.items()):
                if now - received_at < self.bounds.stale_after_s or job_id in known:
                    continue
                for priority in self._jobs.pop(job_id, []):
                    self._running[priority] -= 1
                    freed += 1
                del self._received_at[job_id]
        return freed

    def read_queues(self, batch_waiting: Callable[[], bool]) -> ReadQueues:
        """Which queues to stop and start reading now, taken as carried out. Call from
        one thread (the consumer's). ``batch_waiting`` says whether batch messages wait
        in the queue; it is asked only when interactive work would crowd batch out."""
        running = self.running()
        waiting = self.shares.crowded(running) and batch_waiting()
        wanted = self.shares.paused(running, waiting, batch_cap=self.batch_cap(running))
        with self._lock:
            change = ReadQueues(
                pause=frozenset(wanted - self._paused), resume=frozenset(self._paused - wanted)
            )
            self._paused = wanted
        return change

    # The job threads' events (``workers.scheduler_driver``).

    def interactive_handed_over(self) -> int:
        """An interactive request goes to the engine: batch starts wait for its first
        token. Returns its ticket for ``interactive_prefill_done``."""
        with self._lock:
            return self._awaiting_first_token.add(self._clock())

    def interactive_prefill_done(self, ticket: int) -> None:
        """The request of ``ticket`` reached its first token, or ended (again: nothing)."""
        with self._lock:
            self._awaiting_first_token.remove(ticket)

    def batch_may_start(self, since: float) -> Run | Hold:
        """May a batch job that began waiting at ``since`` reach the engine? Not while an
        interactive request waits for its first token (it would share that prefill
        step), unless it waited ``first_token_wait_s`` already."""
        now = self._clock()
        with self._lock:
            oldest = self._awaiting_first_token.oldest(now)
        deadline = since + self.bounds.first_token_wait_s
        if oldest is None or now >= deadline:
            return Run()
        return Hold(
            until=min(deadline, oldest + self.bounds.first_token_ttl_s),
            reason=HoldReason.FIRST_TOKEN,
        )

    def batch_prefill_place(self, since: float) -> Run | Hold:
        """A prefill place for a batch job that began waiting for one at ``since``:
        granted (``Run.ticket``, for ``batch_prefill_done``) while fewer than
        ``batch_prefills_at_once`` batch prompts are in prefill, or once it waited
        ``prefill_wait_s``."""
        now = self._clock()
        deadline = since + self.bounds.prefill_wait_s
        with self._lock:
            places = self._in_prefill
            limit = self.batch_prefills_at_once
            if not limit or places.live(now) < limit or now >= deadline:
                return Run(ticket=places.add(now))
            oldest = places.oldest(now)
        assert oldest is not None  # the places are full, so one is held
        return Hold(until=min(deadline, oldest + places.ttl_s), reason=HoldReason.PREFILL_FULL)

    def batch_prefill_done(self, ticket: int) -> None:
        """The batch prompt of ``ticket`` reached its first token, or ended (again:
        nothing)."""
        with self._lock:
            self._in_prefill.remove(ticket)

    def first_token_measured(self, seconds: float) -> GiveWay | None:
        """An interactive request's first token took ``seconds`` as its user waits
        (queue and engine): an observation against the SLO. A cut of batch's share
        makes the batch jobs beyond it give way."""
        if self.slo_share is None:
            return None
        return self._give_way_on(self.slo_share.first_token(seconds))

    def inter_token_measured(self, seconds: float) -> GiveWay | None:
        """An interactive stream's mean time between tokens over a window of it
        (``workers.scheduler.inter_tokens``), as ``first_token_measured``."""
        if self.slo_share is None:
            return None
        return self._give_way_on(self.slo_share.inter_token(seconds))

    def interactive_finished(self, engine_first_token_s: float) -> None:
        """An interactive job finished; the engine's part of its first token."""
        self.recent_first_tokens.record(engine_first_token_s)

    def gave_way(self, job_id: str) -> Requeue:
        """A batch job halted to give way ended unfinished. Giving way is no failure: it
        goes back to its queue on the same attempt, and its next run goes on from what
        it published (``workers.job_runner``), not from the start."""
        return Requeue(job_id)

    # What the scheduler knows.

    def running(self) -> dict[Priority, int]:
        """Messages holding a slot, by priority."""
        with self._lock:
            return dict(self._running)

    def batch_cap(self, running: dict[Priority, int]) -> int:
        """How many batch jobs may run now: what the SLO leaves while interactive work
        is about (where it steers the share), and never the last free slot once people
        hold their reserved ones; one on a turn while batch pauses."""
        if self._batch_paused(running):
            return 1 if self._turns.due() else 0
        about = self.interactive_about(running)
        if about and self.slo_share is not None:
            cap = min(self.slo_share.share(), self.shares.batch_max)
        else:
            cap = self.shares.batch_cap(about)
        # People past their reserved slots: batch holds what they leave of the slots.
        # The next person's message is still read (the worker runs a job thread beyond
        # its slots: ``SlotShares.threads``), and the batch job it displaces gives way
        # then, not before.
        return min(cap, max(self.shares.slots - running[Priority.INTERACTIVE], 0))

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

    def awaiting_first_token(self) -> int:
        """Interactive requests before their first token (tickets younger than the TTL)."""
        with self._lock:
            return self._awaiting_first_token.live(self._clock())

    def in_prefill(self) -> int:
        """Batch prompts holding a prefill place."""
        with self._lock:
            return len(self._in_prefill)

    def snapshot(self) -> dict[str, float | int | None]:
        """What the worker's registry entry says of batch's share, at each heartbeat."""
        median = self.recent_first_tokens.median()
        snapshot: dict[str, float | int | None] = {
            "interactive_first_token_ms_p50": None if median is None else round(median * 1000, 2),
            "batch_under_interactive": self.shares.batch_cap(interactive_about=True),
        }
        if self.slo_share is not None:
            snapshot |= self.slo_share.snapshot()
        return snapshot

    def _batch_paused(self, running: dict[Priority, int]) -> bool:
        return self.shares.batch_pauses and self.interactive_about(running)

    def _give_way_on(self, cut: ShareChange | None) -> GiveWay | None:
        # The SLO is at risk: batch jobs beyond the cut share stop now (back to their
        # queue), rather than run on for the seconds a batch answer takes.
        if cut is None or not self._gives_way:
            return None
        return GiveWay(keep=cut.after, cut=cut)


def _implements(scheduler: Scheduler) -> SchedulerInterface:
    return scheduler  # mypy checks here that Scheduler takes every event of the interface
