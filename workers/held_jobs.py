"""The jobs a worker holds: from taking a job's message until its task returns.

The worker reports their ids with every heartbeat (``held_jobs`` in its registry
entry), so the reaper can tell a ``running`` row this live worker is working on from
one it lost track of (its end never written: the reaper sends that one again).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class HeldJobs:
    """Thread-safe multiset of job ids (a duplicate message may hold a job twice)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    @contextmanager
    def holding(self, job_id: str) -> Iterator[None]:
        """Hold ``job_id`` for the block."""
        with self._lock:
            self._held[job_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[job_id] -= 1
                if self._held[job_id] <= 0:
                    del self._held[job_id]

    def ids(self) -> list[str]:
        """The ids held now, sorted."""
        with self._lock:
            return sorted(self._held)
