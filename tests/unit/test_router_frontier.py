"""The routing frontier, computed offline from stored per-tier answers."""

from __future__ import annotations

import json

import pytest

from producer.router.frontier import (
    Frontier,
    StoredAnswer,
    TierPass,
    area_under,
    compute_frontier,
    engine_shares,
    frontier_from_json,
    pick_operating_point,
    share_to_recover,
    thresholds,
    tier_pass_from_json,
)
from schemas.errors import ConfigError


def tier_pass(tier: str, scores: list[float], ms: float) -> TierPass:
    answers = {
        f"c{i:03d}": StoredAnswer(f"c{i:03d}", s, ms + i, engine_s=ms / 1000)
        for i, s in enumerate(scores)
    }
    return TierPass(tier, answers)


def test_thresholds_run_from_all_small_to_all_large_between_distinct_scores() -> None:
    assert thresholds([0.2, 0.8, 0.2, 0.5]) == [0.9, 0.65, 0.35, 0.1]
    assert thresholds([1.0, 0.0]) == [1.001, 0.5, 0.0]


def test_engine_shares_add_up_to_the_block_and_charge_failures_the_mean() -> None:
    shares = engine_shares(12.0, [100.0, 300.0, None])
    assert shares == pytest.approx([2.0, 6.0, 4.0])
    assert sum(shares) == pytest.approx(12.0)
    assert engine_shares(4.0, []) == []


def test_area_and_share_to_recover() -> None:
    shares, values = [0.0, 0.5, 1.0], [0.0, 0.9, 1.0]
    assert area_under(shares, values) == pytest.approx(0.25 * 0.9 + 0.5 * 0.95)
    assert share_to_recover(shares, values, 0.8) == 0.5
    assert share_to_recover(shares, values, 0.95) == 1.0
    assert area_under(shares, [0.0, None, 1.0]) is None


def perfect_router_case() -> tuple[TierPass, TierPass, dict[str, float]]:
    """200 cases: small gets the first 150 right, large gets all; the router scores
    exactly the 50 hard ones highest."""
    small = tier_pass("small", [1.0] * 150 + [0.0] * 50, ms=100.0)
    large = tier_pass("large", [1.0] * 200, ms=1000.0)
    scores = {f"c{i:03d}": (0.9 if i >= 150 else 0.1 + i / 1000) for i in range(200)}
    return small, large, scores


def test_a_router_that_knows_the_hard_cases_recovers_the_gap_with_their_share() -> None:
    small, large, scores = perfect_router_case()
    frontier = compute_frontier(small, large, scores)
    assert frontier.cases == 200
    assert (frontier.quality_small, frontier.quality_large) == (0.75, 1.0)
    first, last = frontier.points[0], frontier.points[-1]
    assert (first.large_share, last.large_share) == (0.0, 1.0)
    assert first.quality.value == 0.75 and last.quality.value == 1.0
    assert first.quality.low < 0.75 < first.quality.high  # an interval, not a point
    # The hard cases score highest: sending them (a quarter) recovers the whole gap.
    assert frontier.large_share_for_80pct == 0.25
    assert frontier.large_share_for_95pct == 0.25
    assert frontier.apgr is not None and frontier.apgr > 0.85
    assert frontier.random.apgr == pytest.approx(0.5)
    assert frontier.random.large_share_for_80pct is not None
    assert frontier.random.large_share_for_80pct >= 0.8
    shares = [p.large_share for p in frontier.points]
    assert shares == sorted(shares)
    # Latency and engine time grow with the large share; all-small is all small's.
    assert first.mean_ms == pytest.approx(100 + 99.5)
    assert last.engine_s == pytest.approx(200.0)
    assert first.engine_s == pytest.approx(20.0)
    assert last.p95_ms > first.p95_ms


def test_a_router_that_ranks_backwards_recovers_late() -> None:
    small, large, scores = perfect_router_case()
    backwards = {case: 1 - score for case, score in scores.items()}
    frontier = compute_frontier(small, large, backwards)
    assert frontier.large_share_for_80pct == 1.0
    assert frontier.apgr is not None and frontier.apgr < 0.2


def test_the_operating_point_is_the_cheapest_within_the_drop_by_its_lower_bound() -> None:
    small, large, scores = perfect_router_case()
    frontier = compute_frontier(small, large, scores)
    point = pick_operating_point(frontier, max_quality_drop_points=3)
    assert point.large_share == 0.25
    assert point.quality_drop_points == 0.0
    assert point.quality_drop_upper_points <= 3
    assert point.latency_ratio_vs_all_large is not None
    assert point.latency_ratio_vs_all_large < 0.5
    chosen = next(p for p in frontier.points if p.large_share == 0.25)
    assert point.threshold == chosen.threshold
    # Each cheaper point's lower bound is more than 3 points below all-large.
    for cheaper in frontier.points:
        if cheaper.large_share < 0.25:
            assert cheaper.delta_vs_all_large.low < -0.03


def test_no_point_qualifies_when_even_all_large_cannot_be_bounded_that_tightly() -> None:
    small, large, scores = perfect_router_case()
    frontier = compute_frontier(small, large, scores)
    with pytest.raises(ConfigError, match="too few"):
        pick_operating_point(frontier, max_quality_drop_points=0)
    with pytest.raises(ConfigError, match="zero or more"):
        pick_operating_point(frontier, max_quality_drop_points=-1)


def test_no_gap_means_no_apgr() -> None:
    same = tier_pass("small", [1.0, 0.0] * 10, ms=100.0)
    scores = {case: 0.5 for case in same.answers}
    frontier = compute_frontier(same, TierPass("large", same.answers), scores)
    assert frontier.apgr is None and frontier.large_share_for_80pct is None
    assert len(frontier.points) == 2  # one distinct score: all-small and all-large


def test_too_few_shared_cases_is_refused() -> None:
    small, large, _ = perfect_router_case()
    with pytest.raises(ConfigError, match="at least 10 cases"):
        compute_frontier(small, large, {"c000": 0.5})


def test_graded_scores_get_bootstrap_intervals() -> None:
    small = tier_pass("small", [0.4 + (i % 3) / 10 for i in range(30)], ms=100.0)
    large = tier_pass("large", [0.8 + (i % 2) / 10 for i in range(30)], ms=900.0)
    scores = {case: i / 30 for i, case in enumerate(sorted(small.answers))}
    frontier = compute_frontier(small, large, scores)
    middle = frontier.points[len(frontier.points) // 2]
    assert middle.quality.low < middle.quality.value < middle.quality.high


def test_the_frontier_round_trips_through_json_and_the_bench_output() -> None:
    small, large, scores = perfect_router_case()
    frontier = compute_frontier(small, large, scores)
    text = json.dumps({"bench": "routing", "frontier": frontier.model_dump(mode="json")})
    assert frontier_from_json(json.loads(text)) == frontier
    assert frontier_from_json(frontier.model_dump(mode="json")) == frontier
    with pytest.raises(ConfigError, match="no routing frontier"):
        frontier_from_json({"bench": "routing"})
    assert isinstance(frontier, Frontier)


def test_a_stored_pass_is_read_back() -> None:
    stored = {
        "tier": "large",
        "model": "m",
        "answers": [
            {"case_id": "a", "text": "4", "score": True, "total_ms": 12.5, "engine_s": 0.1},
            {"case_id": "b", "text": "", "score": 0, "total_ms": None, "engine_s": 0.2},
        ],
    }
    found = tier_pass_from_json(stored)
    assert found.tier == "large"
    assert found.answers["a"] == StoredAnswer("a", 1.0, 12.5, 0.1)
    assert found.answers["b"].total_ms is None
    with pytest.raises(ConfigError, match="not a stored tier pass"):
        tier_pass_from_json({"tier": "large"})
