"""Batch prefills wait while a person waits for a first token.

An engine step takes every waiting request it has room for: a batch job handed to the
engine while an interactive request waits for its first token shares that request's
prefill step. On a GPU that costs little; on a CPU a prefill step takes about as long
as the prompt is, so the person's first token waits for both prompts (one more
prefill). So a batch job about to start waits until no
interactive request of this worker is before its first token, for at most
``WAIT_MAX_S`` (far above an interactive first token's SLO), and a ticket
that was never given back (a path that forgot it) stops counting after ``TICKET_TTL_S``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol

WAIT_MAX_S = 1.0
"""The longest a batch job's start waits for interactive first tokens."""
TICKET_TTL_S = 5.0
"""An interactive request still waiting after this long no longer holds batch back."""


class FirstTokenTicket:
    """One interactive request waiting for its first token; giving it back again does
    nothing (the gate holds it no longer)."""

    def __init__(self, gate: FirstTokenGate) -> None:
        self._gate = gate
        self.taken_at = time.monotonic()

    def give_back(self) -> None:
        self._gate.release(self)


class FirstTokenGate:
    """The worker's interactive requests before their first token. Thread-safe."""

    def __init__(self, *, ttl_s: float = TICKET_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._waiting: set[FirstTokenTicket] = set()
        self._changed = threading.Condition()

    def take(self) -> FirstTokenTicket:
        """A ticket for an interactive request handed to the engine now."""
        ticket = FirstTokenTicket(self)
        with self._changed:
            self._waiting.add(ticket)
        return ticket

    def release(self, ticket: FirstTokenTicket) -> None:
        """Stop holding batch back for ``ticket`` (one no longer held: nothing)."""
        with self._changed:
            self._waiting.discard(ticket)
            self._changed.notify_all()

    def waiting(self) -> int:
        """Interactive requests before their first token (tickets younger than the TTL)."""
        with self._changed:
            self._forget_stale(time.monotonic())
            return len(self._waiting)

    def wait_clear(self, timeout: float = WAIT_MAX_S) -> bool:
        """Block until no interactive request waits for its first token; False if one
        still did after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                now = time.monotonic()
                self._forget_stale(now)
                if not self._waiting:
                    return True
                if now >= deadline:
                    return False
                oldest = min(ticket.taken_at for ticket in self._waiting)
                # Woken by a release, or when the oldest ticket stops counting.
                self._changed.wait(min(deadline, oldest + self._ttl_s) - now)

    def _forget_stale(self, now: float) -> None:
        self._waiting = {t for t in self._waiting if now - t.taken_at < self._ttl_s}


class Ticket(Protocol):
    """Something a request holds until its first token (or its end)."""

    def give_back(self) -> None: ...


@contextlib.contextmanager
def handing_over(ticket: Ticket | None) -> Iterator[None]:
    """Hand a request to the engine inside: if that fails, its ticket is given back."""
    try:
        yield
    except BaseException:
        if ticket is not None:
            ticket.give_back()
        raise
