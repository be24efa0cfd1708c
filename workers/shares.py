"""How a worker's slots are shared between interactive and batch work.

A worker has N slots (its Celery concurrency). Batch jobs may hold at most N - K of
them, so K are always free for an interactive job, which then starts at once even
during a batch flood. Interactive work may hold every slot, except that while batch
jobs wait it leaves ``batch_min`` slots to them: batch work always progresses.

While interactive work is about, batch holds the share the interactive SLO leaves it
(``workers.scheduler.slo_share``), or a fixed share where the tier sets one.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass

from schemas.queues import Priority
from schemas.settings import TierConfig
from workers.scheduler.slo_share import SloShare

RECENT_FIRST_TOKENS = 64
MIN_RECENT_FIRST_TOKENS = 5


@dataclass(frozen=True)
class EngineTiming:
    """A lone request's first token and decode step, as the warm engine ran them."""

    first_token_s: float
    step_s: float

    @property
    def step_share(self) -> float:
        """The decode step as a share of the first token."""
        return self.step_s / self.first_token_s if self.first_token_s > 0 else 0.0


class RecentFirstTokens:
    """The tier's last interactive first tokens, the engine's part of each (from the
    request's start on the engine to its first text), and their median."""

    def __init__(self, window: int = RECENT_FIRST_TOKENS) -> None:
        self._recent: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._median: float | None = None

    def record(self, seconds: float) -> None:
        with self._lock:
            self._recent.append(seconds)
            if len(self._recent) >= MIN_RECENT_FIRST_TOKENS:
                self._median = statistics.median(self._recent)

    def median(self) -> float | None:
        """None until ``MIN_RECENT_FIRST_TOKENS`` were recorded."""
        return self._median


@dataclass(frozen=True)
class SlotShares:
    """How a worker's slots are shared between priorities."""

    slots: int
    reserved_interactive: int
    batch_min: int
    batch_under_interactive: int | None = None
    """A fixed share for batch while interactive work is about (None: the whole
    ``batch_max``, or what the SLO leaves where the gate steers it; 0: batch pauses,
    and progresses only by its turns: ``capacity.SlotGate``)."""

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

    By default a quarter of the slots (at least one) is kept for interactive work, and
    batch's share while interactive work is about is left to the SLO
    (``batch_under_interactive`` None); ``batch_slots_under_interactive`` fixes it.
    """
    reserved = config.reserved_interactive_slots
    if reserved is None:
        reserved = max(1, slots // 4)
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


def share_snapshot(
    shares: SlotShares, recent: RecentFirstTokens, steered: SloShare | None
) -> dict[str, float | int | None]:
    """What the worker's registry entry says of batch's share, at each heartbeat."""
    median = recent.median()
    snapshot: dict[str, float | int | None] = {
        "interactive_first_token_ms_p50": None if median is None else round(median * 1000, 2),
        "batch_under_interactive": shares.batch_cap(interactive_about=True),
    }
    if steered is not None:
        snapshot |= steered.snapshot()
    return snapshot
