"""Batch's share of slots while people wait, sized against the interactive SLO.

Batch work should take everything the interactive SLO leaves. The share is steered by
what interactive requests measure, in the manner of AIMD congestion control:

- each interactive first token, and each interactive stream's mean inter-token time
  over a window of a few tokens (``workers.scheduler.inter_tokens``), is an
  observation against the tier's SLO;
- an observation under ``grow_below`` of the SLO grows the share by one slot, at most
  one each ``grow_every_s``: slowly, since each extra batch sequence makes every engine
  step a little longer, and only on evidence (no request, no growth);
- an observation over ``cut_above`` of the SLO cuts the share by ``cut_factor`` at
  once (the caller makes the batch jobs beyond it give way), and the share then holds
  for ``hold_after_cut_s``: requests already in flight measured the old share;
- between the two, the share holds;
- growth back to the share that was last cut waits ``probe_every_s``: that share
  missed the SLO once, so it is probed rarely, as TCP CUBIC dwells near the window
  where it last lost packets; once it holds, growth beyond it goes at the usual pace.

Without interactive work the share is not asked (batch may use its whole maximum).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ShareTuning:
    """How the share moves; the defaults suit any engine (they are shares of the SLO)."""

    grow_below: float = 0.6
    """An observation under this share of the SLO grows the share."""
    cut_above: float = 0.9
    """Cut when an observation passes this share of the SLO (the SLO is at risk)."""
    cut_factor: float = 0.7
    """A cut multiplies the share by this (as TCP CUBIC does: a halving gave back more
    batch throughput than the SLO needed)."""
    grow_every_s: float = 1.0
    """At most one slot more per this many seconds."""
    hold_after_cut_s: float = 3.0
    """After a cut, neither grow nor cut again for this long."""
    probe_every_s: float = 30.0
    """Growth back to the share last cut waits this long since the last change."""

    def __post_init__(self) -> None:
        if not 0 < self.grow_below <= self.cut_above:
            raise ValueError("grow_below must be positive and at most cut_above")
        if not 0 <= self.cut_factor < 1:
            raise ValueError("cut_factor must lie in [0, 1)")
        if self.grow_every_s <= 0 or self.hold_after_cut_s < 0 or self.probe_every_s <= 0:
            raise ValueError(
                "grow_every_s and probe_every_s must be positive, hold_after_cut_s not negative"
            )


@dataclass(frozen=True)
class ShareChange:
    """A change of the share: from, to, and the observation that caused it (None for
    growth) with what it measured (``first token`` or ``between tokens``)."""

    before: int
    after: int
    observed_s: float | None
    measure: str


class SloShare:
    """The number of slots batch may hold while interactive work is about. Thread-safe.

    ``low`` and ``high`` bound the share (the tier's batch minimum and maximum); it
    starts at ``start`` (default ``high``: on an engine with room to spare nothing is
    lost while it learns; where a full share misses the SLO, the first observation
    halves it). ``ttft_slo_s`` and ``itl_slo_s`` are the tier's interactive first-token
    and inter-token SLOs.
    """

    def __init__(
        self,
        *,
        low: int,
        high: int,
        ttft_slo_s: float,
        itl_slo_s: float,
        clock: Callable[[], float],
        start: int | None = None,
        tuning: ShareTuning | None = None,
    ) -> None:
        if not 0 <= low <= high:
            raise ValueError("the share's bounds must satisfy 0 <= low <= high")
        if ttft_slo_s <= 0 or itl_slo_s <= 0:
            raise ValueError("SLOs must be positive")
        self.low, self.high = low, high
        self.ttft_slo_s, self.itl_slo_s = ttft_slo_s, itl_slo_s
        self._tuning = tuning or ShareTuning()
        self._clock = clock
        self._lock = threading.Lock()
        self._share = min(max(high if start is None else start, low), high)
        now = clock()
        self._changed_at = now
        self._cut_at = -math.inf
        self._cut_from = high + 1
        """The share the last cut came from (none yet: above ``high``)."""
        self.cuts = 0

    def share(self) -> int:
        """The share now."""
        with self._lock:
            return self._share

    def first_token(self, seconds: float) -> ShareChange | None:
        """An interactive request's first token took ``seconds`` (as its user waits:
        queue and engine); the cut it caused, if any."""
        return self._observe(seconds, seconds / self.ttft_slo_s, "first token")

    def inter_token(self, seconds: float) -> ShareChange | None:
        """An interactive stream's mean time between tokens over a window of it (or
        over its whole answer); the cut it caused, if any."""
        return self._observe(seconds, seconds / self.itl_slo_s, "between tokens")

    def snapshot(self) -> dict[str, float | int]:
        """What the worker's registry entry shows of the share."""
        with self._lock:
            return {
                "batch_under_interactive": self._share,
                "interactive_ttft_slo_ms": round(self.ttft_slo_s * 1000, 1),
                "batch_share_cuts": self.cuts,
            }

    def _observe(self, seconds: float, of_slo: float, measure: str) -> ShareChange | None:
        tuning = self._tuning
        with self._lock:
            now = self._clock()
            if now - self._cut_at < tuning.hold_after_cut_s:
                return None  # measured with the share before the cut
            if of_slo > tuning.cut_above:
                before = self._share
                self._share = max(self.low, math.floor(before * tuning.cut_factor))
                self._cut_at = self._changed_at = now
                self._cut_from = before
                self.cuts += 1
                return ShareChange(before, self._share, seconds, measure)
            # Only the step back to the share that missed is slow; past it (that share
            # held) the share grows at the usual pace again.
            probing = self._share + 1 == self._cut_from
            wait = tuning.probe_every_s if probing else tuning.grow_every_s
            if of_slo <= tuning.grow_below and now - self._changed_at >= wait:
                self._share = min(self.high, self._share + 1)
                self._changed_at = now
            return None
