"""Batch prompts enter the engine's prefill a few at a time.

An engine step computes every prompt token it was handed, and on a CPU a step takes
about as long as its tokens are many: batch jobs that start together (a flood's first
moments, or slots freed together) make one step of several prompts, and every person
whose request arrives then waits it out, first token and next token alike. A batch job
therefore takes a prefill place before the engine gets it and gives it back at its
first token, so at most ``limit`` batch prompts are in prefill at once. Its slot is
already its own while it waits: nothing else waits on it.

A place never given back (a path that forgot it) stops counting after ``ttl_s``, and
a job waits at most ``max_wait_s``: pacing must never stall batch work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class PrefillPlace:
    """One batch prompt in prefill; giving it back again does nothing."""

    def __init__(self, places: PrefillPlaces, taken_at: float) -> None:
        self._places = places
        self.taken_at = taken_at

    def give_back(self) -> None:
        self._places.release(self)


class PrefillPlaces:
    """The worker's batch prompts in prefill, at most ``limit`` (0: no limit). Thread-safe."""

    def __init__(
        self,
        limit: int,
        *,
        clock: Callable[[], float],
        max_wait_s: float = 10.0,
        ttl_s: float = 30.0,
    ) -> None:
        if limit < 0:
            raise ValueError("the limit of batch prefills must not be negative")
        self.limit = limit
        self._clock = clock
        self._max_wait_s = max_wait_s
        self._ttl_s = ttl_s
        self._taken: set[PrefillPlace] = set()
        self._changed = threading.Condition()

    def take(self) -> PrefillPlace:
        """A place for a batch prompt handed to the engine now, once one is free (or
        after ``max_wait_s``)."""
        with self._changed:
            deadline = self._clock() + self._max_wait_s
            while self.limit:
                now = self._clock()
                self._taken = {p for p in self._taken if now - p.taken_at < self._ttl_s}
                if len(self._taken) < self.limit or now >= deadline:
                    break
                self._changed.wait(min(deadline - now, 0.5))
            place = PrefillPlace(self, self._clock())
            self._taken.add(place)
            return place

    def release(self, place: PrefillPlace) -> None:
        with self._changed:
            self._taken.discard(place)
            self._changed.notify()

    def in_prefill(self) -> int:
        with self._changed:
            return len(self._taken)
