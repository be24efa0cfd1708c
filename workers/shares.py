"""How a worker's slots are shared between interactive and batch work.

A worker has N slots (its Celery concurrency). Batch jobs may hold at most N - K of
them, so K are always free for an interactive job, which then starts at once even
during a batch flood. Interactive work may hold every slot, except that while batch
jobs wait it leaves ``batch_min`` slots to them: batch work always progresses.

While interactive work is about, batch holds fewer slots still, or none: every
interactive request that arrives while a batch sequence's engine step runs waits out
the rest of that step. Where a step is short against a first token (a GPU) a small
share costs people little; where it is most of one (a CPU), batch pauses.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.queues import Priority
from schemas.settings import TierConfig

# While interactive work is about, batch keeps 1/this of its share by default.
UNDER_INTERACTIVE_DIVISOR = 6

PAUSE_ABOVE_STEP_SHARE = 0.5
"""Batch pauses while people wait where an engine step exceeds this share of an idle
first token. A request that arrives during a batch step waits out the rest of it, up to
a whole step, so its p99 is about (first token + step) / first token of the idle p99:
above 1.5, the interactive goal, beyond this share. Measured: a decode step of 35-47 ms
against a first token of 43-54 ms on 2-core CPU hosts (0.8-0.9); on a GPU, about 10
against 40 ms (0.25)."""


@dataclass(frozen=True)
class EngineTiming:
    """A lone request's first token and decode step, as the warm engine ran them."""

    first_token_s: float
    step_s: float

    @property
    def step_share(self) -> float:
        """The decode step as a share of the first token."""
        return self.step_s / self.first_token_s if self.first_token_s > 0 else 0.0

    @property
    def batch_should_pause(self) -> bool:
        """True where any running batch sequence would cost people more than the goal."""
        return self.step_share > PAUSE_ABOVE_STEP_SHARE


@dataclass(frozen=True)
class SlotShares:
    """How a worker's slots are shared between priorities."""

    slots: int
    reserved_interactive: int
    batch_min: int
    batch_under_interactive: int | None = None
    """Batch's share while interactive work is about (None: the whole ``batch_max``;
    0: batch pauses, and progresses only by its turns: ``capacity.SlotGate``)."""

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
        how many batch jobs may run, where the gate knows better (a batch turn).
        """
        paused = set()
        if batch_cap is None:
            batch_cap = self.batch_cap(interactive_about)
        if running[Priority.BATCH] >= batch_cap:
            paused.add(Priority.BATCH)
        batch_short = running[Priority.BATCH] < self.batch_min
        if batch_waiting and batch_short and self.crowded(running):
            paused.add(Priority.INTERACTIVE)
        return paused

    def crowded(self, running: dict[Priority, int]) -> bool:
        """True when interactive work holds every slot but the batch minimum."""
        return running[Priority.INTERACTIVE] >= self.slots - self.batch_min


def slot_shares(config: TierConfig, slots: int, timing: EngineTiming | None = None) -> SlotShares:
    """The tier's shares for a worker of ``slots`` slots (``--concurrency`` may differ).

    By default a quarter of the slots (at least one) is kept for interactive work, and
    while interactive work is about, batch holds a sixth of its share (at least its
    minimum): 2 of 12 batch slots on a 16-slot worker. Where the engine's ``timing``
    says a step is most of a first token (``PAUSE_ABOVE_STEP_SHARE``), batch pauses
    instead: no slot and no minimum while interactive work is about.
    """
    reserved = config.reserved_interactive_slots
    if reserved is None:
        reserved = max(1, slots // 4)
    reserved = min(reserved, slots - 1)
    batch_max = slots - reserved
    batch_min = min(config.batch_min_slots, batch_max)
    under = config.batch_slots_under_interactive
    if under is None and timing is not None and timing.batch_should_pause:
        return SlotShares(slots, reserved, batch_min=0, batch_under_interactive=0)
    if under is None:
        # Measured on 2-core CPU hosts: with half of the share (6 of 12) beside it, an
        # interactive first token took 3-3.6x its idle time; with 2, 1.4-1.8x.
        under = batch_max // UNDER_INTERACTIVE_DIVISOR
    return SlotShares(
        slots=slots,
        reserved_interactive=reserved,
        batch_min=batch_min,
        batch_under_interactive=min(max(under, batch_min), batch_max),
    )
