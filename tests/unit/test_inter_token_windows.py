"""An interactive stream's time between tokens, observed in windows while it streams."""

from __future__ import annotations

import pytest

from workers.scheduler import InterTokenWindows


def windows(tokens: int = 4) -> tuple[InterTokenWindows, list[float]]:
    seen: list[float] = []
    return InterTokenWindows(seen.append, tokens=tokens), seen


def test_each_window_is_observed_as_it_closes_from_the_first_token_on() -> None:
    w, seen = windows(tokens=4)
    w.arrived(10.0, 1)  # the first token opens the window; its wait is not a gap
    for count in (2, 3, 4):
        w.arrived(10.0 + 0.1 * (count - 1), count)
    assert seen == []  # three gaps: the window is not closed yet
    w.arrived(10.4, 5)
    assert seen == [pytest.approx(0.1)]
    for count in (6, 7, 8, 9):
        w.arrived(10.4 + 0.3 * (count - 5), count)
    assert seen == [pytest.approx(0.1), pytest.approx(0.3)]  # slowed down: seen at once


def test_several_tokens_to_a_delta_count_as_their_gaps() -> None:
    w, seen = windows(tokens=4)
    w.arrived(0.0, 1)
    w.arrived(0.2, 2)
    w.arrived(1.0, 6)  # a reader that fell behind: four tokens in one delta
    assert seen == [pytest.approx(0.2)]  # 1.0 s over five gaps


def test_a_delta_without_tokens_is_not_a_gap() -> None:
    w, seen = windows(tokens=2)
    w.arrived(0.0, 1)
    w.arrived(5.0, 1)  # log probabilities or the finish only
    w.arrived(0.2, 2)
    w.arrived(0.4, 3)
    assert seen == [pytest.approx(0.2)]


def test_the_last_window_is_observed_at_the_end_when_it_holds_half_a_window() -> None:
    w, seen = windows(tokens=4)
    w.arrived(0.0, 1)
    w.arrived(0.5, 3)
    w.finished()
    assert seen == [pytest.approx(0.25)]  # two gaps: half a window
    w.finished()
    assert seen == [pytest.approx(0.25)]  # observed once

    short, none_seen = windows(tokens=4)
    short.arrived(0.0, 1)
    short.arrived(0.9, 2)
    short.finished()
    assert none_seen == []  # one gap says too little


def test_a_window_holds_at_least_two_tokens() -> None:
    with pytest.raises(ValueError):
        InterTokenWindows(lambda _s: None, tokens=1)
