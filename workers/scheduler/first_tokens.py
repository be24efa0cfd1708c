"""The tier's recent interactive first tokens, as the worker's registry entry shows them."""

from __future__ import annotations

import statistics
import threading
from collections import deque

RECENT_FIRST_TOKENS = 64
MIN_RECENT_FIRST_TOKENS = 5


class RecentFirstTokens:
    """The tier's last interactive first tokens, the engine's part of each (from the
    request's start on the engine to its first text), and their median. Thread-safe."""

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
