"""The scheduler's driver in a worker's job threads: it waits where the scheduler says
hold, hands out what a request holds until its first token, and halts the batch jobs
that must give way.

The policy and its state live in ``workers.scheduler``; this module only blocks and
wakes threads (a ``threading.Condition``) and calls into ``RunningJobs``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from workers.running_jobs import RunningJobs
from workers.scheduler import GiveWay, Hold, Run, Scheduler, SlotShares

log = logging.getLogger(__name__)


class Ticket(Protocol):
    """Something a request holds until its first token (or its end)."""

    def give_back(self) -> None: ...


class _Held:
    """A ticket of the scheduler's; giving it back again does nothing."""

    def __init__(self, release: Callable[[int], None], ticket: int) -> None:
        self._release = release
        self._ticket = ticket
        self._given = False

    def give_back(self) -> None:
        # A job gives its ticket back at every delta: after the first, this is all.
        if self._given:
            return
        self._given = True
        self._release(self._ticket)


class SchedulerDriver:
    """Carries out ``scheduler``'s decisions for the job threads. Thread-safe."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        # Every release is announced here, and every hold waits here: a waiter asks the
        # scheduler with the lock held, so no release can slip between its question
        # and its wait.
        self._changed = threading.Condition()

    @classmethod
    def unpaced(cls) -> SchedulerDriver:
        """A driver for job threads alone (no queue reading): no prefill limit, no SLO
        share; batch starts still wait for interactive first tokens."""
        return cls(Scheduler(SlotShares(slots=1, reserved_interactive=0, batch_min=0)))

    def interactive_ticket(self) -> Ticket:
        """For an interactive request handed to the engine now; give it back at its
        first token (batch starts wait until then)."""
        ticket = self.scheduler.interactive_handed_over()
        return _Held(self._releasing(self.scheduler.interactive_prefill_done), ticket)

    def batch_ticket(self) -> Ticket:
        """For a batch request about to go to the engine, once the scheduler lets it:
        after interactive first tokens, with a prefill place. Give it back at the
        request's first token."""
        self._wait(self.scheduler.batch_may_start)
        place = self._wait(self.scheduler.batch_prefill_place).ticket
        assert place is not None  # a granted prefill place carries its ticket
        return _Held(self._releasing(self.scheduler.batch_prefill_done), place)

    def give_way(self, decision: GiveWay | None, running: RunningJobs) -> list[str]:
        """Halt the batch jobs ``decision`` names (none for None); their ids."""
        if decision is None:
            return []
        halted = running.yield_batch(decision.keep)
        self.scheduler.batch_halted(halted)
        cut = decision.cut
        if cut is not None:
            log.info(
                "batch share cut %d -> %d (an interactive request's %s: %.0f ms); %d batch "
                "job(s) give way",
                cut.before,
                cut.after,
                cut.measure,
                (cut.observed_s or 0.0) * 1000,
                len(halted),
            )
        elif halted:
            log.info("%d batch job(s) give way to interactive work", len(halted))
        return halted

    def _wait(self, ask: Callable[[float], Run | Hold]) -> Run:
        clock = self.scheduler.clock
        since = clock()
        with self._changed:
            while True:
                decision = ask(since)
                if isinstance(decision, Run):
                    return decision
                self._changed.wait(max(0.0, decision.until - clock()))

    def _releasing(self, done: Callable[[int], None]) -> Callable[[int], None]:
        def release(ticket: int) -> None:
            with self._changed:
                done(ticket)
                self._changed.notify_all()

        return release


@contextlib.contextmanager
def handing_over(ticket: Ticket | None) -> Iterator[None]:
    """Hand a request to the engine inside: if that fails, its ticket is given back."""
    try:
        yield
    except BaseException:
        if ticket is not None:
            ticket.give_back()
        raise
