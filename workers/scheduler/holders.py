"""Things held since a moment, each forgotten once it is older than a time to live.

The scheduler keeps two such sets: interactive requests before their first token, and
batch prompts in prefill. A holder that is never given back (a path that forgot it)
stops counting after ``ttl_s``, so a lost release can never stall the worker.
"""

from __future__ import annotations

import itertools


class Holders:
    """Holders by key, with the moment each was taken. Not thread-safe: its owner locks."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._taken: dict[int, float] = {}
        self._keys = itertools.count()

    def add(self, now: float) -> int:
        """A new holder taken at ``now``; its key."""
        key = next(self._keys)
        self._taken[key] = now
        return key

    def remove(self, key: int) -> bool:
        """Give ``key`` back; False if it was not held (given back already, or stale)."""
        return self._taken.pop(key, None) is not None

    def live(self, now: float) -> int:
        """How many are held, once those older than the TTL are forgotten."""
        self._forget_stale(now)
        return len(self._taken)

    def oldest(self, now: float) -> float | None:
        """When the oldest live holder was taken; None if none is held."""
        self._forget_stale(now)
        return min(self._taken.values(), default=None)

    def __len__(self) -> int:
        return len(self._taken)

    def _forget_stale(self, now: float) -> None:
        stale = [key for key, taken_at in self._taken.items() if now - taken_at >= self.ttl_s]
        for key in stale:
            del self._taken[key]
