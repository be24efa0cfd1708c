"""Probes (``/healthz``, ``/readyz``, ``/metrics``) paced per client address.

A probe answer is cheap, but a client that asks for them as fast as it can still
makes the gateway parse, route and answer thousands of requests a second on the
event loop that streams tokens to people. Load balancers, orchestrators and
Prometheus ask a few times a minute, so each address gets ``rate`` probe answers a
second (a second's worth at once). A probe over that waits for its turn, so a flood
slows to the rate instead of being refused and retried at once; one that would wait
longer than ``max_wait_s`` waits that long and is then refused with a 429 and a
``Retry-After``, so that even a client with many connections is held to the rate.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from producer.gateway.errors import GatewayError, rate_limited
from producer.gateway.pacing import BytePacer

PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# Addresses remembered at once; past this, the ones whose budget is whole are
# forgotten first (a forgotten address starts with a whole budget, as it would anyway).
MAX_ADDRESSES = 4096


class ProbePacer:
    """``rate`` probe answers a second per client address.

    Raises ``ValueError`` for a rate or wait that is not positive.
    """

    def __init__(
        self,
        rate: float,
        *,
        max_wait_s: float,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or max_wait_s <= 0:
            raise ValueError(f"probes need a positive rate and wait, not {rate}, {max_wait_s}")
        self.rate = rate
        self.max_wait_s = max_wait_s
        self._burst = max(1, math.ceil(rate))
        self._max_addresses = max_addresses
        self._clock = clock
        self._by_address: dict[str, BytePacer] = {}

    def reserve(self, address: str) -> float | None:
        """Take one answer from ``address``'s budget: the seconds to wait before it, or
        None when the wait would pass ``max_wait_s`` (nothing is taken then)."""
        pacer = self._by_address.get(address)
        if pacer is None:
            self._forget_idle()
            pacer = BytePacer(self.rate, burst=self._burst, clock=self._clock)
            self._by_address[address] = pacer
        return pacer.reserve_within(1, self.max_wait_s)

    async def take(self, address: str) -> None:
        """Wait for ``address``'s turn. Raises ``GatewayError`` (429), after waiting
        ``max_wait_s``, when its turn is further off than that."""
        wait = self.reserve(address)
        if wait is None or wait > 0:
            await asyncio.sleep(self.max_wait_s if wait is None else wait)
        if wait is None:
            retry_after = max(1, math.ceil(self.max_wait_s))
            raise GatewayError(
                f"too many probes from this address (at most {self.rate:g} a second)",
                rate_limited(retry_after),
            )

    def _forget_idle(self) -> None:
        if len(self._by_address) < self._max_addresses:
            return
        idle = [address for address, pacer in self._by_address.items() if pacer.idle()]
        for address in idle or list(self._by_address)[: self._max_addresses // 2]:
            del self._by_address[address]
