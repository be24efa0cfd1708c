"""Batch's share under interactive work, steered against the SLO (fake clock)."""

from __future__ import annotations

import pytest

from workers.scheduler import ShareTuning, SloShare


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def share(clock: Clock, **overrides: int) -> SloShare:
    return SloShare(
        low=overrides.get("low", 1),
        high=overrides.get("high", 12),
        ttft_slo_s=1.0,
        itl_slo_s=0.2,
        clock=clock,
        start=overrides.get("start"),
    )


def test_it_starts_full_and_a_first_token_at_risk_cuts_it() -> None:
    clock = Clock()
    s = share(clock)
    assert s.share() == 12
    change = s.first_token(0.95)  # over 0.9 of the 1 s SLO
    assert change is not None and (change.before, change.after) == (12, 8)
    assert s.share() == 8 and s.cuts == 1


def test_a_cut_holds_then_each_healthy_request_grows_the_share_by_one() -> None:
    clock = Clock()
    s = share(clock, start=8)
    s.first_token(2.0)
    assert s.share() == 5  # floor(8 * 0.7)
    clock.now += 1.0
    assert s.first_token(5.0) is None  # in the hold: these measured the old share
    assert s.share() == 5
    clock.now += 2.5  # the hold (3 s) is over
    clock.now += 60.0
    assert s.share() == 5  # no request, no evidence: no growth
    s.first_token(0.1)
    assert s.share() == 6
    s.first_token(0.1)
    assert s.share() == 6  # at most one slot a second
    clock.now += 1.0
    s.inter_token(0.05)
    assert s.share() == 7


def test_observations_near_the_slo_hold_the_share() -> None:
    clock = Clock()
    s = share(clock, start=5)
    for _ in range(5):
        clock.now += 1.0
        s.first_token(0.7)  # between 0.6 and 0.9 of the SLO
        assert s.share() == 5


def test_it_never_leaves_its_bounds() -> None:
    clock = Clock()
    s = share(clock, low=2, high=4)
    for _ in range(10):
        clock.now += 1
        s.first_token(0.1)
    assert s.share() == 4
    for _ in range(5):
        clock.now += 4
        s.first_token(10.0)
    assert s.share() == 2


def test_inter_token_time_counts_against_its_own_slo() -> None:
    clock = Clock()
    s = share(clock)
    assert s.inter_token(0.1) is None  # half the 0.2 s SLO: healthy
    change = s.inter_token(0.19)
    assert change is not None and change.after == 8
    assert change.measure == "between tokens"  # what the worker's log names
    clock.now += 10
    cut = s.first_token(0.95)
    assert cut is not None and cut.measure == "first token"


def test_bad_bounds_and_tunings_are_refused() -> None:
    with pytest.raises(ValueError, match="bounds"):
        SloShare(low=3, high=2, ttft_slo_s=1, itl_slo_s=1, clock=Clock())
    with pytest.raises(ValueError, match="SLOs"):
        SloShare(low=0, high=2, ttft_slo_s=0, itl_slo_s=1, clock=Clock())
    with pytest.raises(ValueError, match="grow_below"):
        ShareTuning(grow_below=0.9, cut_above=0.8)


def test_growth_back_to_the_share_last_cut_is_probed_rarely() -> None:
    clock = Clock()
    s = share(clock, start=10)
    s.first_token(2.0)  # 10 -> 7
    clock.now += 3.0
    for _ in range(2):
        clock.now += 1.0
        s.first_token(0.1)
    assert s.share() == 9  # back to one below the share that missed, a slot a second
    clock.now += 1.0
    s.first_token(0.1)
    assert s.share() == 9  # 10 missed the SLO: it is tried again only after 30 s
    clock.now += 30.0
    s.first_token(0.1)
    assert s.share() == 10


def test_once_the_probed_share_holds_growth_beyond_it_is_not_slowed() -> None:
    clock = Clock()
    s = share(clock, start=4)
    s.first_token(2.0)  # 4 -> 2, the last cut came from 4
    clock.now += 3.0
    clock.now += 1.0
    s.first_token(0.1)
    assert s.share() == 3
    clock.now += 30.0
    s.first_token(0.1)
    assert s.share() == 4  # the probe of the share that missed
    for expected in (5, 6, 7):
        clock.now += 1.0
        s.first_token(0.1)
        assert s.share() == expected  # past it: a slot a second again
