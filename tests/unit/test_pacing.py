"""The byte budget every download of a gateway shares."""

from __future__ import annotations

import asyncio

import pytest

from producer.gateway.pacing import BytePacer


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
