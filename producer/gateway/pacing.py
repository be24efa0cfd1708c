"""One byte budget that every download of a gateway shares (and one for uploads).

A download is bulk work: whatever its client's speed, the pages it reads and the
pieces it sends take the CPU and the interpreter that key checks, submits and token
streams need. Socket buffers hide a slow reader from its server for the first few MiB
of every connection, so many readers that each read slowly still make the gateway
read and send all of that at once. Downloads therefore draw from one budget of
``rate`` bytes a second (up to ``burst`` bytes ahead), in the order they ask, so
that all of them together take a bounded share of the gateway, however many there are
and however fast or slowly each is read. Uploads are bulk work too: their lines are
checked and inserted in worker threads at a budget of their own.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

from starlette.types import Message, Receive


class BytePacer:
    """A shared budget of ``rate`` bytes a second, ``burst`` bytes of which may be
    taken at once (a generic cell rate algorithm: no task, no lock).

    Raises ``ValueError`` for a rate or burst that is not positive.
    """

    def __init__(
        self, rate: float, *, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError(f"a byte budget needs a positive rate and burst, not {rate}, {burst}")
        self.rate = float(rate)
        self.burst = burst
        self._clock = clock
        self._due = clock()
        """When the bytes granted so far are paid for: the budget is spent until then."""
        # Uploads take from their budget in worker threads, downloads on the event loop.
        self._lock = threading.Lock()

    def reserve(self, size: int) -> float:
        """Take ``size`` bytes from the budget now; the seconds to wait before sending them
        (0 when the budget holds them). Reservations are served in the order made."""
        wait = self.reserve_within(size, math.inf)
        assert wait is not None
        return wait

    def reserve_within(self, size: int, max_wait_s: float) -> float | None:
        """As :meth:`reserve`, but only when the wait is at most ``max_wait_s``; None
        (and nothing taken) when it would be longer."""
        with self._lock:
            now = self._clock()
            due = max(self._due, now) + size / self.rate
            wait = max(0.0, due - now - self.burst / self.rate)
            if wait > max_wait_s:
                return None
            self._due = due
            return wait

    def idle(self) -> bool:
        """Whether the whole burst is available: nothing reserved is still unpaid."""
        return self._due <= self._clock()

    async def take(self, size: int) -> None:
        """Wait until ``size`` bytes may be sent."""
        wait = self.reserve(size)
        if wait > 0:
            await asyncio.sleep(wait)

    def take_blocking(self, size: int) -> None:
        """Wait, in a thread of its own, until ``size`` bytes may be processed."""
        wait = self.reserve(size)
        if wait > 0:
            time.sleep(wait)


def paced_receive(receive: Receive, pacer: BytePacer) -> Receive:
    """``receive`` (an ASGI request's), its body's bytes taken from ``pacer`` as they come.

    An upload's multipart body is parsed on the event loop as it arrives; from a fast
    client a large file arrives at once, and its parsing would hold the loop for that
    long. Paced, the parsing is spread at the budget's rate between other requests.
    """

    async def receive_paced() -> Message:
        message = await receive()
        body = message.get("body", b"")
        if body:
            await pacer.take(len(body))
        return message

    return receive_paced
