"""Batch starts wait while an interactive request waits for its first token."""

from __future__ import annotations

import threading
import time

import pytest

from workers.first_tokens import FirstTokenGate, handing_over


def test_with_no_interactive_request_waiting_a_batch_start_goes_at_once() -> None:
    gate = FirstTokenGate()
    started = time.monotonic()
    assert gate.wait_clear(timeout=1.0)
    assert time.monotonic() - started < 0.5  # a wait would last the whole second


def test_a_batch_start_waits_for_the_first_token_then_goes() -> None:
    gate = FirstTokenGate()
    ticket = gate.take()
    threading.Timer(0.1, ticket.give_back).start()
    started = time.monotonic()
    assert gate.wait_clear(timeout=2.0)
    assert 0.08 <= time.monotonic() - started < 1.0
    assert gate.waiting() == 0


def test_a_batch_start_waits_no_longer_than_its_timeout() -> None:
    gate = FirstTokenGate()
    gate.take()
    started = time.monotonic()
    assert not gate.wait_clear(timeout=0.1)
    assert time.monotonic() - started < 0.5


def test_a_ticket_never_given_back_stops_counting_after_its_ttl() -> None:
    gate = FirstTokenGate(ttl_s=0.1)
    gate.take()
    assert gate.waiting() == 1
    started = time.monotonic()
    assert gate.wait_clear(timeout=2.0)
    assert time.monotonic() - started < 0.5
    assert gate.waiting() == 0


def test_giving_a_ticket_back_twice_releases_only_it() -> None:
    gate = FirstTokenGate()
    first, _second = gate.take(), gate.take()
    first.give_back()
    first.give_back()
    assert gate.waiting() == 1


def test_a_failed_hand_over_gives_its_ticket_back_and_a_good_one_keeps_it() -> None:
    gate = FirstTokenGate()
    kept = gate.take()
    with handing_over(kept):
        pass
    lost = gate.take()
    with pytest.raises(RuntimeError), handing_over(lost):
        raise RuntimeError("the engine refused the request")
    assert gate.waiting() == 1
    kept.give_back()
    assert gate.waiting() == 0
