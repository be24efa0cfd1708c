"""The byte budget every download of a gateway shares, and probes paced per address."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from producer.gateway.errors import GatewayError
from producer.gateway.pacing import BytePacer, paced_receive
from producer.gateway.probe_pacing import ProbePacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_burst_is_free_and_what_follows_waits_its_turn_at_the_rate() -> None:
    clock = Clock()
    pacer = BytePacer(1000, burst=500, clock=clock)
    assert pacer.reserve(300) == 0
    assert pacer.reserve(200) == 0  # the burst, spent
    assert pacer.reserve(100) == pytest.approx(0.1)
    assert pacer.reserve(100) == pytest.approx(0.2)  # after the one before it
    clock.now += 0.2
    assert pacer.reserve(100) == pytest.approx(0.1)


def test_an_idle_budget_refills_to_the_burst_and_no_further() -> None:
    clock = Clock()
    pacer = BytePacer(1000, burst=500, clock=clock)
    pacer.reserve(500)
    clock.now += 60.0
    assert pacer.reserve(500) == 0
    assert pacer.reserve(1000) == pytest.approx(1.0)


def test_a_piece_larger_than_the_burst_waits_for_the_rest() -> None:
    pacer = BytePacer(1000, burst=500, clock=Clock())
    assert pacer.reserve(1500) == pytest.approx(1.0)


def test_take_sleeps_what_reserve_says() -> None:
    clock = Clock()
    pacer = BytePacer(10_000, burst=100, clock=clock)

    async def run() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await pacer.take(100)  # free
        await pacer.take(500)  # 0.05 s
        return loop.time() - started

    assert 0.04 <= asyncio.run(run()) < 2.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 10), (-1, 10), (10, 0)])
def test_a_budget_needs_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="positive rate and burst"):
        BytePacer(rate, burst=burst)


def test_probes_from_one_address_get_its_rate_and_others_are_untouched() -> None:
    clock = Clock()
    pacer = ProbePacer(10, max_wait_s=2.0, clock=clock)
    waits = [pacer.reserve("10.0.0.1") for _ in range(30)]
    assert waits[:10] == [0.0] * 10, "a second's worth is answered at once"
    assert waits[10] == pytest.approx(0.1)
    assert waits[29] == pytest.approx(2.0)
    assert pacer.reserve("10.0.0.2") == 0.0, "another address has its own budget"
    assert pacer.reserve("10.0.0.1") is None, "past the longest wait: refused"
    clock.now += 3.0
    assert pacer.reserve("10.0.0.1") == pytest.approx(0.0), "a refusal took nothing"


def test_a_probe_past_the_longest_wait_waits_then_gets_a_429() -> None:
    # A frozen clock: on a busy host the reservations' own time would refill the budget.
    pacer = ProbePacer(1000, max_wait_s=0.05, clock=Clock())
    for _ in range(1000 + 50):
        pacer.reserve("10.0.0.1")
    started = time.monotonic()
    with pytest.raises(GatewayError) as refused:
        asyncio.run(pacer.take("10.0.0.1"))
    assert time.monotonic() - started >= 0.05, "a refusal is not answered at once"
    assert refused.value.http.status == 429 and refused.value.http.retry_after_s == 1


def test_the_address_table_stays_bounded() -> None:
    clock = Clock()
    pacer = ProbePacer(1, max_wait_s=1.0, max_addresses=8, clock=clock)
    for n in range(100):
        pacer.reserve(f"10.0.0.{n}")
        clock.now += 0.01
    assert len(pacer._by_address) <= 8


@pytest.mark.parametrize("rate, wait", [(0, 1.0), (1, 0.0)])
def test_a_probe_pacer_needs_a_positive_rate_and_wait(rate: float, wait: float) -> None:
    with pytest.raises(ValueError):
        ProbePacer(rate, max_wait_s=wait)


def test_threads_taking_from_one_budget_share_it() -> None:
    import threading

    pacer = BytePacer(100_000, burst=10_000)
    threads = [threading.Thread(target=pacer.take_blocking, args=(50_000,)) for _ in range(2)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 100 kB at 100 kB/s, 10 kB of it at once: at least 0.9 s for the two together.
    assert time.monotonic() - started >= 0.85


def test_an_upload_body_is_taken_from_its_budget_as_it_arrives() -> None:
    taken: list[int] = []

    class Recording(BytePacer):
        async def take(self, size: int) -> None:
            taken.append(size)

    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b"a" * 10, "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"b" * 5, "more_body": False},
    ]
    sent = list(messages)

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def drain() -> list[Any]:
        paced = paced_receive(receive, Recording(1000, burst=10))
        return [await paced() for _ in range(3)]

    assert asyncio.run(drain()) == sent  # every message, unchanged and in order
    assert taken == [10, 5]  # each body's bytes, none for an empty one
