"""How a worker's slots are shared between interactive and batch work.

A worker has N slots (the sequences its engine runs at once); it runs one job thread
more (``SlotShares.threads``). Batch jobs may hold at most N - K of the slots, so K are
always free for an interactive job, which then starts at once even during a batch
flood. Interactive work may hold every slot, except that while batch jobs wait it
leaves ``batch_min`` slots to them: batch work always progresses.

While interactive work is about, batch holds the share the interactive SLO leaves it
(``workers.scheduler.slo_share``), or a fixed share where the tier sets one.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.queues import Priority
from schemas.settings import TierConfig


@dataclass(frozen=True)
class SlotShares:
    """How a worker's slots are shared between priorities."""

    slots: int
    reserved_interactive: int
    batch_min: int
    batch_under_interactive: int | None = None
    """A fixed share for batch while interactive work is about (None: the whole
    ``batch_max``, or what the SLO leaves where the scheduler steers it; 0: batch
    pauses, and progresses only by its turns: ``workers.scheduler.turns``)."""

    def __post_init__(self) -> None:
        if not 0 <= self.reserved_interactive < self.slots:
            raise ValueError("reserved interactive slots must be fewer than the worker's slots")
        if not 0 <= self.batch_min <= self.slots - self.reserved_interactive:
            raise ValueError("the batch minimum cannot exceed the slots batch may use")
        if self.batch_under_interactive is not None and not (
            self.batch_min <= self.batch_under_interactive <= self.batch_max
        ):
            raise ValueError(
                "batch's share under interactive work must lie between its minimum and maximum"
            )

    @property
    def batch_max(self) -> int:
        return self.slots - self.reserved_interactive

    @property
    def threads(self) -> int:
        """The worker's job threads (the messages it may hold): one beyond its slots, so
        a person's message is read while every slot is taken (the batch job it displaces
        gives way then, rather than a slot standing empty in case a person comes)."""
        return self.slots + 1

    @property
    def batch_pauses(self) -> bool:
        """Batch holds no slot while interactive work is about."""
        return self.batch_under_interactive == 0

    def batch_cap(self, interactive_about: bool) -> int:
        """How many batch jobs may run: fewer while interactive work is about."""
        if interactive_about and self.batch_under_interactive is not None:
            return self.batch_under_interactive
        return self.batch_max

    def paused(
        self,
        running: dict[Priority, int],
        batch_waiting: bool,
        *,
        interactive_about: bool = False,
        batch_cap: int | None = None,
    ) -> set[Priority]:
        """Which priorities' queues to stop reading, given what runs and what waits.

        ``interactive_about``: interactive work runs or ran a moment ago. ``batch_cap``:
        how many batch jobs may run, where the scheduler knows better (a batch turn).
        """
        paused = set()
        if batch_cap is None:
            batch_cap = self.batch_cap(interactive_about)
        if running[Priority.BATCH] >= batch_cap:
            paused.add(Priority.BATCH)
        if running[Priority.INTERACTIVE] >= self.slots:
            # No batch job left to displace: the thread beyond the slots would only hold
            # the message from another worker.
            paused.add(Priority.INTERACTIVE)
        # A minimum batch may not use now (it pauses) keeps no slot from interactive work.
        batch_short = running[Priority.BATCH] < min(self.batch_min, batch_cap)
        if batch_waiting and batch_short and self.crowded(running):
            paused.add(Priority.INTERACTIVE)
        return paused

    def crowded(self, running: dict[Priority, int]) -> bool:
        """True when interactive work holds every slot but the batch minimum."""
        return running[Priority.INTERACTIVE] >= self.slots - self.batch_min


def slot_shares(config: TierConfig, slots: int) -> SlotShares:
    """The tier's shares for a worker of ``slots`` slots (``--concurrency`` may differ).

    By default a sixteenth of the slots (at least one) is kept for interactive work
    (past it, batch holds what people leave, and a person arriving while every slot is
    taken displaces a batch job: ``Scheduler.batch_cap``), and
    batch's share while interactive work is about is left to the SLO
    (``batch_under_interactive`` None); ``batch_slots_under_interactive`` fixes it.
    """
    reserved = config.reserved_interactive_slots
    if reserved is None:
        reserved = max(1, slots // 16)
    reserved = min(reserved, slots - 1)
    batch_max = slots - reserved
    batch_min = min(config.batch_min_slots, batch_max)
    under = config.batch_slots_under_interactive
    return SlotShares(
        slots=slots,
        reserved_interactive=reserved,
        batch_min=batch_min,
        batch_under_interactive=None if under is None else min(max(under, batch_min), batch_max),
    )
