"""Batch prompts enter the engine's prefill a few at a time (real threads, short waits)."""

from __future__ import annotations

import threading
import time

import pytest

from workers.scheduler.prefills import PrefillPlaces


def test_a_batch_prompt_waits_for_the_one_in_prefill_to_reach_its_first_token() -> None:
    places = PrefillPlaces(1, clock=time.monotonic)
    first = places.take()
    taken = threading.Event()
    thread = threading.Thread(target=lambda: (places.take(), taken.set()))
    thread.start()
    assert not taken.wait(0.3)  # the first prompt is still in prefill
    first.give_back()
    assert taken.wait(2.0)
    thread.join()
    first.give_back()  # again: nothing
    assert places.in_prefill() == 1


def test_no_limit_never_waits_and_a_wait_is_bounded() -> None:
    unlimited = PrefillPlaces(0, clock=time.monotonic)
    for _ in range(5):
        unlimited.take()
    assert unlimited.in_prefill() == 5
    bounded = PrefillPlaces(1, clock=time.monotonic, max_wait_s=0.2)
    bounded.take()  # never given back
    started = time.monotonic()
    bounded.take()
    assert time.monotonic() - started < 2.0
    with pytest.raises(ValueError, match="negative"):
        PrefillPlaces(-1, clock=time.monotonic)


def test_a_place_never_given_back_stops_counting() -> None:
    now = [0.0]
    places = PrefillPlaces(1, clock=lambda: now[0], ttl_s=30.0)
    places.take()
    now[0] = 31.0
    places.take()  # the first is stale: no wait
    assert places.in_prefill() == 1
