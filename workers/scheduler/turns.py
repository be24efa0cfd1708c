"""Batch's turns while it pauses for interactive work.

Where a tier pauses batch while people are about (a fixed share of 0), one batch job
may run to its end once ``max_pause_s`` pass without a batch job ending, so batch work
progresses even under an interactive stream that never leaves a gap. A job halted to
give way is no progress: it goes back to its queue unfinished.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection


class BatchTurns:
    """When batch's next turn is due, and which job holds it. Thread-safe."""

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
        """These batch jobs gave way: their ends are no progress."""
        with self._lock:
            self._halted.update(task_ids)

    def ended(self, task_id: str) -> None:
        """A batch job ended: progress, unless it gave way."""
        with self._lock:
            if task_id == self._turn:
                self._turn = None
            if task_id in self._halted:
                self._halted.discard(task_id)
                return
            self._progress_at = self._clock()
