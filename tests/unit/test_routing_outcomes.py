"""Routers on measured outcomes: the oracle bound and the cross-validated learned one."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.routing import frontier_summary
from bench.routing_outcomes import outcome_routers
from producer.router.frontier import Frontier, StoredAnswer, TierPass
from producer.router.outcomes import OutcomeHead, cross_validated_scores, large_wins

CASES = 200


def passes(large_better: list[bool]) -> tuple[TierPass, TierPass]:
    """Small answers in 100 ms and is right on every fourth case; large takes 300 ms
    and is right where ``large_better`` says."""
    ids = [f"c{i:03d}" for i in range(len(large_better))]
    small = {i: StoredAnswer(i, float(n % 4 == 0), 100.0, 0.1) for n, i in enumerate(ids)}
    large = {
        i: StoredAnswer(i, 1.0 if better else 0.0, 300.0, 0.3)
        for i, better in zip(ids, large_better, strict=True)
    }
    return TierPass("small", small), TierPass("large", large)


def summarise(frontier: Frontier) -> dict[str, Any]:
    return frontier_summary(frontier, max_quality_drop=3.0)


def test_the_oracle_recovers_the_whole_gap_with_large_only_where_it_wins() -> None:
    rng = np.random.default_rng(1)
    better = list(rng.random(CASES) < 0.6)
    small, large = passes(better)
    ids = sorted(small.answers)
    wins = int(large_wins(small, large, ids).sum())
    features = rng.standard_normal((CASES, 5))
    found = outcome_routers(small, large, features, ids, summarise=summarise)
    assert found["large_wins"] == wins
    oracle = found["oracle"]
    assert oracle["apgr"] > 0.8
    assert oracle["large_share_for_95pct"] <= wins / CASES + 1e-9
    assert oracle["quality_drop_points"] <= 0, "the oracle is never worse than all-large"


def test_a_learned_router_finds_a_feature_that_predicts_wins_on_cases_it_never_saw() -> None:
    rng = np.random.default_rng(2)
    signal = rng.standard_normal(CASES)
    better = list(signal > -0.3)
    small, large = passes(better)
    ids = sorted(small.answers)
    labels = large_wins(small, large, ids)
    noise = rng.standard_normal((CASES, 20))
    informative = np.column_stack([signal, noise])
    scores = cross_validated_scores(informative, labels, ids)
    wins = [scores[i] for i, win in zip(ids, labels, strict=True) if win]
    losses = [scores[i] for i, win in zip(ids, labels, strict=True) if not win]
    ranked_above = np.mean([w > loss for w in wins for loss in losses])
    assert ranked_above > 0.7, "out of fold, a win mostly scores above a loss (AUC)"
    learned = outcome_routers(small, large, informative, ids, summarise=summarise)["learned_cv"]
    uninformed = outcome_routers(small, large, noise, ids, summarise=summarise)["learned_cv"]
    assert learned["apgr"] > 0.7
    assert uninformed["apgr"] < learned["apgr"] - 0.2, "noise alone predicts nothing"
    assert learned["folds"] == 10
    head = OutcomeHead.from_json(learned["head"])
    fitted = head.score(informative)
    assert fitted[labels == 1].mean() > fitted[labels == 0].mean() + 0.2
